"""Real routers behind the gate, served by real HTTP servers, for the tests
that attack the gate the way a client would (raw bytes on a socket).

Every app has the same shop: protected endpoints under ``/checkout...`` and
open ones elsewhere. A protected endpoint is the oracle: it answers with the
header ``x-oracle: PROTECTED`` when the request reached it through the gate
(``scope["queuegate"]`` holds an admission) and ``x-oracle: LEAK`` when the
router dispatched a gated method to it without the gate's admission.
"""
