"""The trust wing: the server trusts no client. Every reply is checked before any strategy or
phase sees it (``reply_checks``: what a reply must hold, and the error reply that takes the
place of one that fails), and two ways of breaking that trust on purpose are there to study
it: declared attacks of chosen partitions (``attacks``) and test-only fault injection
(``fault_injection``)."""
