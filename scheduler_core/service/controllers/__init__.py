"""The controllers: what acts on the cluster on its own, at each maintenance pass of the
leader, no caller waiting (``FaultRestarter``: fault jobs' pods deleted and the restarts
recorded; ``ResetConfigs``: the jobs' reset-config; ``FailedCreations``: pods whose vNPU
could not be made; ``TorShare``: ``tor-share-cm``), and ``MalformedPods``, which answers the
watches with an Event. Each owns what it needs to act once and say a failure once (what it
wrote, the last error); what to act on is the state's (``service.state``), whose holds and
assumed binds expire there, on every replica."""
