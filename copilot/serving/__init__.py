"""Work on threads of their own: the batch scheduler and its question jobs, reservations, the ingest
job manager, the remote target."""
