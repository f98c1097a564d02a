from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("login", views.login),
    path("checkout", views.checkout),
    path("tickets/<str:event>/buy", views.buy),
]
