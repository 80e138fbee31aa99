"""Scripts that check nbaccel on real processes: run them under ``debug_launcher`` (their
``main``) or ``nbaccel launch`` (the file)."""
