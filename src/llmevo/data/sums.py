"""The sha256 pin of every data file llmevo reads (relative to a data directory): the sums
recorded in each folder's ``SOURCE.md``. Read through ``pins`` (the checked reads), ``fetch``
(downloads) and ``store`` (the default data folder)."""

from __future__ import annotations

LM_FILE_SHA256: dict[str, str] = {
    "wikitext-2/wiki.train.tokens": "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
    "wikitext-2/wiki.valid.tokens": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    "wikitext-2/wiki.test.tokens": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
    "wikitext-2-raw/wiki.train.raw": "6707892fa3788b5ab9ed78ab5ff37d9fe825f6011a2ad4fcd6a6d467f0e7da57",
    "wikitext-2-raw/wiki.valid.raw": "4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7",
    "wikitext-2-raw/wiki.test.raw": "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08",
    "tinyshakespeare/input.txt": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
}

ALPACA_FILE = "alpaca/alpaca_5000.json"
GSM8K_TEST_FILE = "gsm8k/test.jsonl"
HH_HELPFUL_TEST_FILE = "hh-rlhf/helpful-base/test.jsonl"
HH_HARMLESS_TEST_FILE = "hh-rlhf/harmless-base/test.jsonl"

SUITE_FILE_SHA256: dict[str, str] = {
    ALPACA_FILE: "fc1add24c93c9fbbe585a64a6c9bf6165eb110225f4470efbff382a913558ec0",
    GSM8K_TEST_FILE: "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
    HH_HELPFUL_TEST_FILE: "41c3a32fe45a7075f7e32b11bd29383f9fe650287354a95568f61295a8e694da",
    HH_HARMLESS_TEST_FILE: "14d765196c9f18d84f9bb3a78bac608c8f2915110ebcbd74ec95db7b7198b008",
}
