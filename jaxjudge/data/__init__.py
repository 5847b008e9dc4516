"""Data: judge-evaluation sets as `Example` records (id, group, text fields, human scores).

`TASKS` holds the built-in tasks (human-score ranges, aspects, splits, files), each a
`TaskSource`, the same description a user's table gets (`TaskSource.from_file` with a
`FieldMap`: JSON Lines, CSV or Parquet, `read_file_task`), and `load_task_data` loads one as an
experiment config's task describes it.
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
from jaxjudge.data.table import FieldMap, read_file_task, read_rows
from jaxjudge.data.tasks import (
    SUMMEVAL_RANGE,
    TASKS,
    TaskData,
    TaskSource,
    load_task_data,
    resolve_data_dir,
    task_dev_docs,
)

__all__ = [
    "DataError",
    "Example",
    "FieldMap",
    "HELPSTEER2_ASPECTS",
    "SEMREL_RANGE",
    "STSB_RANGE",
    "SUMMEVAL_ASPECTS",
    "SUMMEVAL_DEV_DOC_IDS",
    "SUMMEVAL_RANGE",
    "SUMMEVAL_SUBSET_DOC_IDS",
    "TASKS",
    "TaskData",
    "TaskSource",
    "connected_groups",
    "from_prompt_range",
    "group_indices",
    "iter_jsonl",
    "load_helpsteer2",
    "load_semrel",
    "load_stsb",
    "load_summeval",
    "load_summeval_subset",
    "load_task_data",
    "read_file_task",
    "read_rows",
    "resolve_data_dir",
    "score_array",
    "summeval_dev_doc_ids",
    "task_dev_docs",
    "text_hash",
    "to_prompt_range",
]
