"""Model loading, fingerprints and chat templates."""

from ._fingerprint import ModelFingerprint as ModelFingerprint
from ._loading import builtin_model_dir as builtin_model_dir
from ._fingerprint import fingerprint as fingerprint
from ._loading import load_model as load_model
from ._loading import resolve_device as resolve_device
from ._loading import resolve_dtype as resolve_dtype
from ._templates import ChatTemplate as ChatTemplate
from ._templates import chat_template as chat_template
from ._templates import encode as encode
from ._templates import encode_prompts as encode_prompts
from ._templates import left_pad as left_pad
from ._templates import pad_token_id as pad_token_id
from ._templates import cut_at_stop as cut_at_stop
from ._templates import stop_token_ids as stop_token_ids
from ._tokenizers import char_tokenizer as char_tokenizer
from ._builders import random_llama_dir as random_llama_dir
