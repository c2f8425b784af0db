"""Collecting rollouts: one turn, one episode, one group, many groups, and their store.

Read in this order: ``turns`` (one turn: sample, check, step), ``rollouts`` (an
episode and a group), ``tree`` (groups that fork), ``attempts`` (a group retried
and timed out into one record), ``collector`` (many groups: ``options`` checks the
arguments, ``plan`` names the groups and decides what to skip, ``finish`` stamps
each record), ``records`` and ``store`` (the JSONL a run leaves), ``streaming``
(groups handed over while collection goes on) and ``executors`` (where episodes run).
Above them all, ``spec`` describes a whole run once (:class:`~.spec.RunSpec`) and
``run`` runs it (:func:`~.run.run`: env config, tokenizer, policy, groups, collect).
"""
