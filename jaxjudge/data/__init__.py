"""Data: judge-evaluation sets as `Example` records (id, group, text fields, human scores).

Loaders read the local JSON Lines copies (or the hub through the optional `datasets`
package) and validate every row: a malformed row raises `DataError` naming file, line and
field.
"""

from jaxjudge.data.example import (
    DataError,
    Example,
    connected_groups,
    group_indices,
    iter_jsonl,
    score_array,
    text_hash,
)
from jaxjudge.data.helpsteer2 import HELPSTEER2_ASPECTS, load_helpsteer2
from jaxjudge.data.pairs import (
    SEMREL_RANGE,
    STSB_RANGE,
    from_prompt_range,
    load_semrel,
    load_stsb,
    to_prompt_range,
)
from jaxjudge.data.summeval import (
    SUMMEVAL_ASPECTS,
    SUMMEVAL_DEV_DOC_IDS,
    SUMMEVAL_SUBSET_DOC_IDS,
    load_summeval,
    load_summeval_subset,
    summeval_dev_doc_ids,
)

__all__ = [
    "DataError",
    "Example",
    "HELPSTEER2_ASPECTS",
    "SEMREL_RANGE",
    "STSB_RANGE",
    "SUMMEVAL_ASPECTS",
    "SUMMEVAL_DEV_DOC_IDS",
    "SUMMEVAL_SUBSET_DOC_IDS",
    "connected_groups",
    "from_prompt_range",
    "group_indices",
    "iter_jsonl",
    "load_helpsteer2",
    "load_semrel",
    "load_stsb",
    "load_summeval",
    "load_summeval_subset",
    "score_array",
    "summeval_dev_doc_ids",
    "text_hash",
    "to_prompt_range",
]
