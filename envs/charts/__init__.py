"""Charts: questions about a bar chart the model can only answer by zooming in.

The multimodal flagship: the prompt shows a generated bar chart whose value labels
are too small to read at the model's resolution, and the ``zoom`` tool answers with
an enlarged crop of one bar, so the model asks for pictures and reads the pictures it
got, over several turns. The data is generated from a seed and the reward is exact.
"""
