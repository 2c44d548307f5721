"""Alerts: past incidents looked up when an Alertmanager alert fires (the question an alert asks,
the receiver that answers it, the table that keeps the answers, the chat webhook they go to)."""
