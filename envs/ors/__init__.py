"""The OpenReward Standard (ORS) both ways: our text environments served with the
``openreward`` SDK's own server (:mod:`.server`), and any ORS environment played under
our collector (:mod:`.adapter`, registered as ``ors``). Needs the ``ors`` extra and
the SDK (``make install`` puts it in; see docs/env-servers.md, "ORS")."""
