"""Starting worker processes and watching them: the one loop a notebook's launch, its pool and
each remote host's agent all run (``supervisor.Supervisor``, over ``processes.start_worker``).
"""
