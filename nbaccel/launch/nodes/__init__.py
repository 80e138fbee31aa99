"""Several machines: where the ranks of every machine meet and how each watches the others.

``meeting.meet_machines`` brings the machines of one attempt together over the rendezvous store
(``rendezvous``), on the interface that reaches the master (``netif``); ``peers.NodeWatch``
notices a machine that fails or is lost; ``elastic`` is torchrun's rendezvous for
``nbaccel launch --rdzv_backend``.
"""
