"""The statistics the search decides and reports by, and `nas-train` prints: intervals of
one accuracy (`intervals`), of two models on the same examples (`paired`, `tango`), of
architectures trained several times (`repeated`), and ties of noisy costs (`cost_ties`).

Numbers in, numbers out: nothing here knows of graphs, studies or training, and nothing
imports JAX, so a report or a rerun of a finished search can read them cheaply.
"""
