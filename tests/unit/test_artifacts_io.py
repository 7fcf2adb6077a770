"""Atomic writes: all or nothing, no temp files left behind; invalid artifacts never written.
Every write guarded: an I/O failure is one ``WriteError`` line naming the file and the cause."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from llmevo.artifacts import (
    load_artifact,
    save_artifact,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from llmevo.artifacts.io import (
    StreamFile,
    check_output_dir,
    check_output_file,
    guarded_write,
    staged_folder,
    write_file_atomic,
)
from llmevo.errors import ArtifactError, ConfigError, WriteError

RELAY = "2610.21126-rope-relay.component-cpu-seeds42-44.json"


class _Unserialisable:
    pass


def test_failed_serialisation_keeps_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "metrics.json"
    write_json_atomic(target, {"old": True})
    before = target.read_bytes()
    # Big enough that json streams chunks into the temp file before reaching the bad value.
    data = {"values": list(range(5000)), "bad": _Unserialisable()}
    with pytest.raises(TypeError):
        write_json_atomic(target, data)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_failed_first_write_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "new" / "metrics.json"
    with pytest.raises(TypeError):
        write_json_atomic(target, {"bad": {1, 2}})
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_writes_create_parents_and_replace_content(tmp_path: Path) -> None:
    text_target = tmp_path / "a" / "b" / "note.md"
    write_text_atomic(text_target, "first 位置\n")
    write_text_atomic(text_target, "second 位置\n")
    assert text_target.read_text(encoding="utf-8") == "second 位置\n"
    bytes_target = tmp_path / "c" / "blob.bin"
    write_bytes_atomic(bytes_target, b"\x00\xff")
    assert bytes_target.read_bytes() == b"\x00\xff"
    json_target = tmp_path / "d.json"
    write_json_atomic(json_target, {"k": [1, 2]})
    assert json_target.read_text(encoding="utf-8") == '{\n  "k": [\n    1,\n    2\n  ]\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "c", "d.json"]


def test_save_artifact_validates_first(reference_dir: Path, tmp_path: Path) -> None:
    data: dict[str, Any] = json.loads((reference_dir / RELAY).read_text(encoding="utf-8"))
    target = tmp_path / "component.json"
    save_artifact(data, target)
    text = target.read_text(encoding="utf-8")
    assert text.endswith("}\n") and text.startswith('{\n  "schema_version": 2,')
    assert load_artifact(target).to_json_dict() == data

    data["metrics"]["gradient_norm_keys"]["mean"] = "large"
    with pytest.raises(ArtifactError, match=r"component\.json: metrics\.gradient_norm_keys\.mean"):
        save_artifact(data, target)
    assert target.read_text(encoding="utf-8") == text
    with pytest.raises(ArtifactError):
        save_artifact(data, tmp_path / "never.json")
    assert not (tmp_path / "never.json").exists()


def test_save_artifact_revalidates_a_mutated_model(reference_dir: Path, tmp_path: Path) -> None:
    artifact = load_artifact(reference_dir / RELAY)
    artifact.seeds = ["forty-two"]  # type: ignore[list-item]  # assignment is not validated
    with pytest.raises(ArtifactError, match="seeds.0"):
        save_artifact(artifact, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


# --- the guarded write path -----------------------------------------------------------------


def _full(*_args: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


WRITERS = {
    "bytes": lambda path: write_bytes_atomic(path, b"new"),
    "text": lambda path: write_text_atomic(path, "new"),
    "json": lambda path: write_json_atomic(path, {"new": True}),
    "by name": lambda path: write_file_atomic(path, lambda temporary: temporary.write_bytes(b"new")),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_full_disk_is_one_line_naming_the_file_and_keeps_the_old_one(
        writer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    monkeypatch.setattr(os, "fsync", _full)
    with pytest.raises(WriteError, match=f"^cannot write {target}: no space left on device$"):
        WRITERS[writer](target)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


@pytest.mark.parametrize("code, cause", [(errno.EROFS, "read-only file system"),
                                         (errno.EACCES, "permission denied"),
                                         (errno.EDQUOT, "disk quota exceeded")])
def test_each_os_cause_is_named(code: int, cause: str) -> None:
    with pytest.raises(WriteError, match=f"^cannot write x/y: {cause}$"), guarded_write("x/y"):
        raise OSError(code, os.strerror(code))


def test_a_library_error_reporting_an_os_error_is_named_and_others_pass_through(tmp_path: Path) -> None:
    from safetensors import SafetensorError

    def rust_full(_temporary: Path) -> None:  # how safetensors reports a full disk
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    with pytest.raises(WriteError, match="model.safetensors: no space left on device$"):
        write_file_atomic(tmp_path / "model.safetensors", rust_full)

    def bug(_temporary: Path) -> None:
        raise ValueError("not an I/O failure")

    with pytest.raises(ValueError, match="not an I/O failure"):
        write_file_atomic(tmp_path / "model.safetensors", bug)
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_place_is_named(tmp_path: Path) -> None:
    target = Path("/proc/llmevo-cannot-write-here/x.json")  # read-only for root too
    with pytest.raises(WriteError, match=f"^cannot write {target}: "):
        write_json_atomic(target, {})


def test_text_that_is_not_utf8_is_refused_by_name(tmp_path: Path) -> None:
    target = tmp_path / "note.md"
    with pytest.raises(WriteError, match=r"note\.md: a lone surrogate \\ud800 is not valid UTF-8$"):
        write_text_atomic(target, "ab\ud800")
    with pytest.raises(WriteError, match=r"note\.md: byte 0xff is not valid UTF-8$"):  # sys.argv's
        write_json_atomic(target, {"a": "b\udcff"})
    assert list(tmp_path.iterdir()) == []


def test_output_paths_that_are_not_utf8_are_refused_before_work(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--out .*r\\xff\.json: byte 0xff is not valid UTF-8"):
        check_output_file(tmp_path / "r\udcff.json")
    with pytest.raises(ConfigError, match=r"^--to .*d\\xff: byte 0xff"):
        check_output_dir(tmp_path / "d\udcff", "--to")


def test_a_staged_folder_appears_whole_or_not_at_all(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ckpt"
    with staged_folder(folder) as staging:
        write_text_atomic(staging / "a.txt", "one")
        write_text_atomic(staging / "b.txt", "one")
    assert sorted(p.name for p in folder.iterdir()) == ["a.txt", "b.txt"]
    with staged_folder(folder) as staging:  # into an existing folder: the new files replace
        write_text_atomic(staging / "a.txt", "two")
    assert (folder / "a.txt").read_text() == "two" and (folder / "b.txt").read_text() == "one"
    with pytest.raises(WriteError, match=f"^cannot write {folder}/b.txt: no space left on device$"):
        with staged_folder(folder) as staging:
            write_text_atomic(staging / "a.txt", "three")
            monkeypatch.setattr(os, "fsync", _full)
            write_text_atomic(staging / "b.txt", "three")
    assert [(folder / name).read_text() for name in ("a.txt", "b.txt")] == ["two", "one"]
    with pytest.raises(WriteError, match=f"^cannot write {tmp_path}/new/a.txt: no space"):
        with staged_folder(tmp_path / "new") as staging:
            write_text_atomic(staging / "a.txt", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_stream_that_fails_to_write_is_removed(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    kept = tmp_path / "kept.log"
    with StreamFile(kept) as stream:
        stream.write(b"one ")
    with StreamFile(kept, append=True) as stream:
        stream.write(b"two")
    assert kept.read_bytes() == b"one two"
    torn = StreamFile(tmp_path / "torn.log")
    torn.write(b"half")
    monkeypatch.setattr(os, "fsync", _full)
    with pytest.raises(WriteError, match=f"^cannot write {tmp_path}/torn.log: no space left on device$"):
        torn.close()
    torn.close()  # after a failed write: nothing left to do
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.log"]
