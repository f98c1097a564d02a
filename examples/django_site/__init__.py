"""A Django site behind queuegate (ASGI), its session feeding ``identify=``:

export DJANGO_SETTINGS_MODULE=examples.django_site.settings
export QUEUEGATE_REDIS_URL=redis://localhost:6379/0 QUEUEGATE_SECRET_KEY=...
uvicorn examples.django_site.asgi:application
"""
