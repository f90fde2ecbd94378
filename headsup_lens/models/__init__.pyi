# The public names of `headsup_lens.models`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._builders import random_llama_dir as random_llama_dir
from ._builtin import builtin_model_dir as builtin_model_dir
from ._fingerprint import ModelFingerprint as ModelFingerprint
from ._fingerprint import fingerprint as fingerprint
from ._gguf import gguf_file as gguf_file
from ._gguf import gguf_source_of as gguf_source_of
from ._gguf import write_scaled_gguf as write_scaled_gguf
from ._hf import hf_model as hf_model
from ._hf import plain_module as plain_module
from ._hf import save_hf_tokenizer as save_hf_tokenizer
from ._loading import load_model as load_model
from ._loading import model_device as model_device
from ._loading import resolve_device as resolve_device
from ._loading import resolve_dtype as resolve_dtype
from ._readout import FINAL_NORM_OUT as FINAL_NORM_OUT
from ._readout import decode_residual as decode_residual
from ._readout import unembed as unembed
from ._readout import verify_readout as verify_readout
from ._templates import PAPER_FORMATS as PAPER_FORMATS
from ._templates import PromptFormat as PromptFormat
from ._templates import check_context as check_context
from ._templates import cut_at_stop as cut_at_stop
from ._templates import detect_family as detect_family
from ._templates import encode as encode
from ._templates import encode_prompts as encode_prompts
from ._templates import format_for as format_for
from ._templates import left_pad as left_pad
from ._templates import pad_token_id as pad_token_id
from ._templates import prompt_format as prompt_format
from ._templates import set_prompt_format as set_prompt_format
from ._templates import stop_token_ids as stop_token_ids
from ._templates import tokenizer_format as tokenizer_format
from ._tokenizers import char_tokenizer as char_tokenizer
