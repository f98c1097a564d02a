"""Route-bound gating: the gate runs after the app's router, on the routes
themselves, so it sees exactly what the endpoint will serve.

The ``QueueGate`` middleware stays in front of the app (it holds the rooms,
serves the waiting page's endpoints and adds new cookies to responses);
these put a room on a route:

- Starlette: ``queuegate.gated`` (``queuegate.integrations.starlette``), an
  ASGI wrapper or route middleware;
- FastAPI: ``Depends(queuegate.integrations.fastapi.queue("sale"))``;
- Django: ``@queuegate.integrations.django.gated("sale")`` on a view.

A room used only on routes is declared without paths: ``Room("sale",
rate=10, per=5)``.
"""
