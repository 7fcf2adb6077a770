"""``llmevo new component NAME --slot SLOT --paper ARXIV_ID``: the files a new component starts from.

Three changes under a source tree ``root`` (the repository, or a copy of it):

- ``src/llmevo/components/<slot package>/<NAME>.py``: the module, its docstring citing the
  paper, a typed config, the ``@register`` manifest pre-filled from the ledger entry (paper,
  ablation = the slot's llama_modern choice, status ``component_only``) and the slot's
  constructor, with a body that raises ``NotImplementedError`` naming the paper until it is
  written;
- ``tests/reference/test_<NAME>_reference.py``: a reference test that fails until written;
- its line in ``src/llmevo/components/__init__.py``'s ``COMPONENTS``, so the component registers and
  the contract suite (``tests/contract``) runs over it at once (and fails until it works).

Everything is checked before anything is written (a name already registered or already a
module, an unknown slot or one the scaffold has no template for, a paper not in the ledger),
and a failure while writing removes what was written, so a refusal leaves the tree as it was.
"""

from __future__ import annotations

import contextlib
import json
import keyword
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from llmevo.artifacts.io import write_text_atomic
from llmevo.errors import ConfigError
from llmevo.papers.ledger import Ledger, PaperEntry
from llmevo.registry import SLOTS

NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class SlotTemplate:
    package: str  # under llmevo.components
    ablation: str  # the slot's llama_modern choice, the baseline arm
    imports: str
    base: str
    body: str  # the class body; {name}, {paper} and {config} are filled in


_RAISE = 'raise NotImplementedError("{name}: implement arXiv {paper} here (see the module docstring)")'

TEMPLATES: dict[str, SlotTemplate] = {
    "position": SlotTemplate("position", "rope", "from torch import Tensor\n\nfrom llmevo.components.base import ModelDims, PositionEncoding\nfrom llmevo.registry import Paper, StrictModel, register\n", "PositionEncoding", f'''    """Override the hooks this encoding uses and delete the others (the base class's do nothing)."""

    def __init__(self, config: {{config}}, dims: ModelDims):
        super().__init__()
        self.config = config

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:  # (B, T, D)
        {_RAISE}

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:  # (B, H, T, Dh)
        {_RAISE}

    def attention_bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor | None:  # (H, Tq, Tk)
        {_RAISE}
'''),
    "attention": SlotTemplate("attention", "mha", "from torch import Tensor\n\nfrom llmevo.components.base import Attention, AttentionContext, ModelDims\nfrom llmevo.registry import Paper, StrictModel, register\n", "Attention", f'''    def __init__(self, config: {{config}}, dims: ModelDims, layer_index: int):
        super().__init__()
        self.config = config

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:  # (B, T, D) -> (B, T, D), causal
        {_RAISE}
'''),
    "feedforward": SlotTemplate("feedforward", "swiglu", "from torch import Tensor\n\nfrom llmevo.components.base import FeedForward, ModelDims\nfrom llmevo.registry import Paper, StrictModel, register\n", "FeedForward", f'''    def __init__(self, config: {{config}}, dims: ModelDims):
        super().__init__()
        self.config = config

    def forward(self, x: Tensor) -> Tensor:  # (B, T, D) -> (B, T, D)
        {_RAISE}
'''),
    "norm": SlotTemplate("norm", "rmsnorm", "from torch import Tensor, nn\n\nfrom llmevo.registry import Paper, StrictModel, register\n", "nn.Module", f'''    def __init__(self, config: {{config}}, dim: int):
        super().__init__()
        self.config = config

    def forward(self, x: Tensor) -> Tensor:  # (..., dim)
        {_RAISE}
'''),
    "block": SlotTemplate("block", "pre_norm", "from torch import Tensor\n\nfrom llmevo.components.base import AttentionContext, Block, BlockParts, ModelDims\nfrom llmevo.registry import Paper, StrictModel, register\n", "Block", f'''    def __init__(self, config: {{config}}, dims: ModelDims, parts: BlockParts, layer_index: int):
        super().__init__()
        self.config = config

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:  # (B, T, D) -> (B, T, D)
        {_RAISE}
'''),
    "optimizer": SlotTemplate("optim", "adamw", "from torch import nn\n\nfrom llmevo.components.optim.base import OptimizerComponent\nfrom llmevo.components.optim.optimizer import Optimizer\nfrom llmevo.registry import Paper, StrictModel, register\n", "OptimizerComponent", f'''    def build(self, model: nn.Module, lr: float, weight_decay: float) -> Optimizer:
        {_RAISE}
'''),
}


def _q(text: str) -> str:
    """``text`` as a double-quoted Python string literal."""
    return json.dumps(text, ensure_ascii=False)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _authors(entry: PaperEntry) -> str:
    return entry.authors[0] + (" et al." if len(entry.authors) > 1 else "")


def module_text(name: str, slot: str, entry: PaperEntry) -> str:
    """The component module's source."""
    template = TEMPLATES[slot]
    camel = _camel(name)
    config = f"{camel}Config"
    body = template.body.format(name=name, paper=entry.arxiv_id, config=config)
    cited = textwrap.fill(f'{_authors(entry)}, "{entry.title}", arXiv {entry.arxiv_id} '
                          f"({entry.year}). Ledger: {entry.why}", width=92)
    return f'''"""{entry.title}.

{cited}

Reference test: tests/reference/test_{name}_reference.py, against a formula or an independent
implementation, written so that it fails if this component's math is wrong.

Deviations from the paper: (list them).
"""

from __future__ import annotations

{template.imports}

class {config}(StrictModel):
    """{name}'s hyperparameters (unknown keys are rejected)."""


@register(
    slot={_q(slot)},
    name={_q(name)},
    config={config},
    paper=Paper(
        arxiv_id={_q(entry.arxiv_id)},
        title={_q(entry.title)},
        url={_q("https://arxiv.org/abs/" + entry.arxiv_id)},
        organization={_q("TODO: the authors' organisation (" + _authors(entry) + ")")},
    ),
    ablation={_q(template.ablation)},
    implementation_status="component_only",
    scope="TODO: what of the paper this component reproduces, and what it leaves out.",
)
class {camel}({template.base}):
{body}'''


def reference_test_text(name: str, entry: PaperEntry) -> str:
    return f'''"""Reference test of {name}: arXiv {entry.arxiv_id}, "{entry.title}"."""

import pytest


def test_{name}_matches_its_reference():
    pytest.fail("write the reference test for {name}: compare it with a formula or an "
                "independent implementation of arXiv {entry.arxiv_id} that would fail if its "
                "math were wrong")
'''


def _with_entry(init_text: str, slot: str, package: str, name: str) -> str:
    """``llmevo/components/__init__.py`` with ``name``'s line in ``COMPONENTS``: after the
    slot's last line (the slot's components list it last), or, for a slot with none yet, as
    the table's last line. A table that cannot be found is a ``ConfigError``."""
    entry = f'    ("{slot}", "{name}", "{package}.{name}"),\n'
    table = re.search(r"^COMPONENTS: .*= \(\n((?:    \(.*\),\n)*)\)$", init_text, re.MULTILINE)
    if table is None:
        raise ConfigError("src/llmevo/components/__init__.py: its COMPONENTS table was not found; "
                          "add the component's line by hand")
    lines = table.group(1).splitlines(keepends=True)
    same_slot = [index for index, line in enumerate(lines) if line.startswith(f'    ("{slot}", ')]
    at = same_slot[-1] + 1 if same_slot else len(lines)
    lines.insert(at, entry)
    return init_text[: table.start(1)] + "".join(lines) + init_text[table.end(1):]


@dataclass(frozen=True)
class ScaffoldPlan:
    files: dict[Path, str]  # path -> full new text, in the order they are written
    created: tuple[Path, ...]  # the files that do not exist yet


def plan_component(root: Path, name: str, slot: str, arxiv_id: str, ledger: Ledger,
                   registered: set[str]) -> ScaffoldPlan:
    """Check everything and return what ``write_plan`` would write; nothing is touched."""
    if slot not in SLOTS:
        raise ConfigError(f"--slot {slot}: unknown slot; slots are: {', '.join(SLOTS)}")
    if slot not in TEMPLATES:
        raise ConfigError(f"--slot {slot}: the scaffold writes components of the slots "
                          f"{', '.join(TEMPLATES)}; a {slot} component is written by hand")
    if not (NAME.fullmatch(name) and name.isidentifier()):  # fullmatch: no trailing newline
        raise ConfigError(f"component name {name!r} must be a lowercase Python identifier "
                          "(letters, digits, underscores), e.g. scaled_swiglu")
    if keyword.iskeyword(name):
        raise ConfigError(f"component name '{name}' is a Python keyword: its module could not be "
                          f"imported by name ('from ... import {name}'); choose another, e.g. {name}_x")
    if name in registered:
        raise ConfigError(f"component '{name}' is already registered; choose another name")
    entry = ledger.require(arxiv_id)
    package = TEMPLATES[slot].package
    components = root / "src" / "llmevo" / "components"
    init = components / "__init__.py"
    if not init.is_file():
        raise ConfigError(f"{init} not found; run the scaffold from the repository root "
                          "(or pass --root)")
    module = components / package / f"{name}.py"
    test = root / "tests" / "reference" / f"test_{name}_reference.py"
    for path in (module, test):
        if path.exists():
            raise ConfigError(f"{path} already exists; choose another name")
    files = {module: module_text(name, slot, entry), test: reference_test_text(name, entry),
             init: _with_entry(init.read_text(encoding="utf-8"), slot, package, name)}
    return ScaffoldPlan(files=files, created=(module, test))


def write_plan(plan: ScaffoldPlan) -> list[Path]:
    """Write the planned files (each atomically; on a failure the new ones are removed)."""
    written: list[Path] = []
    try:
        for path, text in plan.files.items():
            write_text_atomic(path, text)
            written.append(path)
    except BaseException:
        for path in written:
            if path in plan.created:
                with contextlib.suppress(OSError):
                    path.unlink()
        raise
    return written
