"""The notebook's side of a launch: place workers, supervise them, relay and draw their output.

``notebook.notebook_launcher`` runs attempts (``attempt.LaunchPlan``); ``pool.WorkerPool``
runs generations (``poolgroup.PoolGroup``). Both get their ranks from a placement
(``placement``, chosen by ``places.place``: this machine or other hosts) and run the one
supervisor loop (``launch.supervision``); ``launchgroup`` and ``poolgroup`` are the two
policies over that loop.
"""
