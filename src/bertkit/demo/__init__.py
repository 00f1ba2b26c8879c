"""`bertkit demo`: BERT's whole story on built-in data, and how it is reported.

| module      | job                                                                                 |
|-------------|-------------------------------------------------------------------------------------|
| `run`       | the stages: vocabulary, prepare, pre-train, a from-scratch twin, fine-tune, compare  |
| `stats`     | the paired bootstrap: a 95% interval on the gain of one model over another          |
| `plots`     | the curves of a run (also `bertkit plot`) and the fine-tuning panels                 |
| `report`    | OUT/report.md and OUT/report.html                                                    |
"""

from .run import TASKS, DemoSettings, demo

__all__ = ["TASKS", "DemoSettings", "demo"]
