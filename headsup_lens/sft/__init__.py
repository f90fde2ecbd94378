"""Supervised fine-tuning and the head activation patterns along it (Zhao, Du et al., "SFT achieves
rapid task adaption via alternating attention head activation patterns"): full or low-rank
fine-tuning with patterns and accuracy recorded at chosen steps."""

from ._finetune import FinetuneConfig as FinetuneConfig
from ._finetune import FinetuneResult as FinetuneResult
from ._finetune import add_lora_ as add_lora_
from ._finetune import finetune_ as finetune_
from ._finetune import pattern_subset as pattern_subset
from ._finetune import remove_lora_ as remove_lora_
