"""The training precision: "auto" picks bf16 only where the hardware computes it natively."""
from __future__ import annotations

import pytest

from metacog_fast.alfworld.finetune.dpo import DPOTrainConfig
from metacog_fast.alfworld.finetune.sft import SFTConfig
from metacog_fast.finetune.base import resolve_precision
from metacog_fast.scoring.encoder import cpu_has_bf16


def test_explicit_precisions_are_kept() -> None:
    for on_cuda in (False, True):
        assert resolve_precision("bf16", on_cuda) == "bf16"
        assert resolve_precision("fp32", on_cuda) == "fp32"


def test_auto_is_bf16_on_a_gpu_and_on_a_cpu_with_native_bf16_only() -> None:
    assert resolve_precision("auto", on_cuda=True) == "bf16"
    assert resolve_precision("auto", on_cuda=False) == ("bf16" if cpu_has_bf16() else "fp32")


def test_bad_precision_names_the_argument() -> None:
    with pytest.raises(ValueError, match="precision: expected one of"):
        resolve_precision("fp16", on_cuda=False)
    with pytest.raises(ValueError, match="precision: expected one of"):
        SFTConfig(precision="fp16").validate()
    with pytest.raises(ValueError, match="precision: expected one of"):
        DPOTrainConfig(precision="half").validate()


def test_configs_default_to_auto() -> None:
    assert SFTConfig().precision == DPOTrainConfig().precision == "auto"
