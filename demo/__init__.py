"""The demo factory, beside the product: the synthetic world (shapes, speech), golden sets, the demo checkpoint
builders and their sources, the training of the demo weights, and the trained weights. Only the command line and
the benches import it."""
