"""Local training: the shared loops with hooks (``loops``), the loss terms and step arithmetic
several algorithms share (``terms``), and a client's view of its data (``local_client``)."""
