"""Knowledge distillation: registered objectives (``objectives``), teacher handling
(``teachers``) and the one distillation loop (``loop``) that every distilling method uses."""
