"""Knowledge distillation: objectives, teachers, the one distillation loop, compact students.

Registered objectives (``objectives``, ``classic_objectives``), teacher handling
(``teachers``), the one distillation loop (``loop``) that every distilling method uses, and the
training of a compact student from a fixed teacher (``student``).
"""

from . import classic_objectives  # noqa: F401  (registers the objectives)
