"""Search-R1: retrieval-augmented multi-turn question answering (arXiv 2503.09516).

The model reasons, issues search queries, reads retrieved passages and answers.
Two protocols share one task: Search-R1's tag protocol under the continuation
renderer, and verl's ``search`` tool under the chat renderer. Retrievers (bm25,
lucene, dense, http) live in :mod:`agentenvs.envs.search_r1.retrievers`.

Importing this package is cheap: heavy dependencies load inside functions.
"""
