"""Synthesis: build new subgraphs that satisfy target abstract properties.

    nas.synthesis.sequential       AbstractSequentialSynthesizer (one-input chains)
    nas.synthesis.enum_sequential  EnumerativeSequentialSynthesizer
    nas.synthesis.random_enum_sequential  RandomEnumerativeSequentialSynthesizer
    nas.synthesis.progressive      ProgressiveSequentialSynthesizer (greedy/uniform/weighted)
    nas.synthesis.primer           PrimerSequentialSynthesizer
    nas.synthesis.graph            GraphSynthesizer (several inputs/outputs)
    nas.synthesis.variables        a child's variables: inherited where they fit, else fresh
"""
