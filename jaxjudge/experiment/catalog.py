"""What ``jaxjudge list`` prints: the built-in tasks, templates, methods and the judges at hand.

Each function returns lines of text; nothing is loaded beyond the registries themselves.
"""

from __future__ import annotations

from jaxjudge.data.tasks import TASKS
from jaxjudge.models.gguf import default_model_path, gguf_dir
from jaxjudge.prompts.library import TEMPLATE_SPECS, resource_path

__all__ = ["CATALOGS", "list_judges", "list_methods", "list_tasks", "list_templates"]


def list_tasks() -> list[str]:
    """One line per built-in task: name, aspects, human range, split modes."""
    out = ["built-in tasks (a user's task is a data file: jaxjudge sweep --data, or TaskSpec(file=...)):"]
    for name, t in TASKS.items():
        lo, hi = t.human_range
        out.append(f"  {name:10s} human {lo:g}-{hi:g}  aspects {', '.join(t.aspects)}  splits {', '.join(t.splits)}")
    return out


def list_templates() -> list[str]:
    """One line per built-in template file (copy one to start your own)."""
    folder = resource_path("templates")
    out = [f"built-in templates (in {folder}; copy one and edit it for your data):"]
    for (task, aspect), (file, _, _) in sorted(TEMPLATE_SPECS.items()):
        out.append(f"  {task}/{aspect:13s} {file}")
    return out


def list_methods() -> list[str]:
    """One line per method family: its name, kind and the extractions it reads."""
    # The registry imports every method module, and with them jax (~2 s): only here.
    from jaxjudge.report.methods import METHODS

    out = ["methods (--methods, ExperimentConfig.methods):"]
    for name, m in METHODS.items():
        needs = "; ".join(n.describe() for n in m.needs) or "the judge's scores"
        out.append(f"  {name:22s} {m.kind.value:7s} reads {needs}")
    return out


def list_judges() -> list[str]:
    """The embedded judge, the GGUF files in the judge folder, and the other forms a judge takes."""
    out = ["judges (--judge, --assistant, ModelSpec.path):"]
    try:
        out.append(f"  default                 the embedded SmolLM2-135M-Instruct: {default_model_path()}")
    except FileNotFoundError as e:
        out.append(f"  default                 not installed: {e}")
    folder = gguf_dir()
    files = sorted(folder.glob("*.gguf")) if folder.is_dir() else []
    for f in files:
        out.append(f"  gguf:{f.name}")
    if not files:
        out.append(f"  gguf:<file>             none in {folder} ($JAXJUDGE_GGUF_DIR)")
    out.append("  a GGUF file, a Hugging Face model folder, or a Hub id org/name (downloaded when online)")
    return out


CATALOGS = {"tasks": list_tasks, "templates": list_templates, "methods": list_methods, "judges": list_judges}
"""``jaxjudge list WHAT`` -> the function giving its lines."""
