"""A Django site in one file whose checkout has a waiting room: uvicorn django_app:application"""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.http import HttpRequest, HttpResponse
from django.urls import path

from queuegate import QueueGate, Room
from queuegate.integrations.django import gated

# The gate reads its secret key from QUEUEGATE_SECRET_KEY (16+ random characters, the same in
# every process) and, when it is missing, says so and how to make one as it is made.
REDIS_URL = os.environ.get("QUEUEGATE_REDIS_URL", "redis://localhost:6379/0")

# In a project: settings.py.
settings.configure(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"])


# In a project: views.py and urls.py.
@gated("sale")  # sync and async views alike
def checkout(request: HttpRequest) -> HttpResponse:
    return HttpResponse("Your turn: checkout")


urlpatterns = [path("checkout", checkout)]

# In a project: asgi.py. Serve `application`, the gate around Django's app.
application = QueueGate(
    get_asgi_application(),
    rooms=[Room("sale", rate=1, per=10)],  # no paths: the decorator names the room
    redis=REDIS_URL,
)
