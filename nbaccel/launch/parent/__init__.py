"""The notebook's side of a launch: start workers, supervise them, relay and draw their output.

``notebook.notebook_launcher`` runs attempts (``attempt.LaunchPlan``); ``pool.WorkerPool``
runs generations (``poolgroup.PoolGroup``). Both set up their ranks the same way
(``localranks``) and run the same loop (``supervisor.Supervisor``) over processes that
``processes`` starts; ``launchgroup`` and ``poolgroup`` are the two policies over that loop.
"""
