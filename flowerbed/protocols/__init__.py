"""Protocols and their reusable phases.

A protocol is an ordered list of phases run by the ServerApp in one run context
(``phase.Protocol``). Each phase module holds both halves of its step: the server half
(``Phase.run``) and the client half (``Phase.client_step``), which the ClientApp reaches
through the phase's Flower message types.

* ``fl_rounds``: N rounds of a Flower strategy (``train``/``evaluate``);
* ``local_fit``: every client trains alone and optionally uploads (``train.local_fit``);
* ``exchange``: the one-shot broadcast and transfer step (``train.exchange``);
* ``kt_metrics``: clients measure their knowledge-transfer metrics (``query.kt_metrics``).

``query_draw`` is QKT's seeded query draw (+ its ``kt-query*`` keys): ``local_fit.client_query``
draws a client's query with it for the exchange and knowledge-transfer metrics phases.
"""
