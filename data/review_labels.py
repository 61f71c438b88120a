"""The names of the MixCuBe synthesis verdicts, written into stage tables by one domain and read by another.

An attempt is judged twice (MixCuBe paper §2): by the automatic filters (App. A.6; `curation/synthesis_filters.py`
writes the `verdict` column of SYNTHESIS_FILTER_SCORES) and by people in synthesis QA (`annotation/label_configs.py`
offers the choices, whose machine names land in SYNTHESIS_QA's `decision`). `synthesis/resynthesis.py` reads both to
decide which attempts are drawn again (App. B.1). The names live here so that all three agree without importing one
another; they are stored in workspaces and releases, so they never change.
"""

from __future__ import annotations

# Automatic filter verdicts (App. A.6).
KEEP = "keep"
REJECT_BRISQUE = "reject_brisque"
REJECT_CLIP_LOW = "reject_clip_low"
REJECT_CLIP_HIGH = "reject_clip_high"
ERROR = "error"
VERDICTS = (KEEP, REJECT_BRISQUE, REJECT_CLIP_LOW, REJECT_CLIP_HIGH, ERROR)

# Synthesis QA choices (§2, App. B.1): accept, reject, or ask for a retry with a tailored prompt or a fixed mask.
ACCEPT = "accept"
REJECT_ARTIFACTS = "reject_artifacts"
REJECT_MARKER = "reject_cultural_marker"
RETRY_PROMPT = "retry_prompt"
FIX_MASK = "fix_mask"

# The reviewer name of the auto-accept policy (`annotation/backends.py`): decisions it made are nobody's, and every
# card, datasheet and deviation list says so. Stored in workspaces and manifests.
AUTO_ACCEPT = "auto_accept"
