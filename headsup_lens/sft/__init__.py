"""Supervised fine-tuning and the head activation patterns along it (Zhao, Du et al., "SFT achieves
rapid task adaption via alternating attention head activation patterns"): full or low-rank
fine-tuning with patterns and accuracy recorded at chosen steps (`finetune_`), the paper's
measurements on a run (Table 1, Fig. 2, Fig. 5, Eq. 3: `_study`) and pattern-guided data selection
(Tables 2/3: `data_selection`)."""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
