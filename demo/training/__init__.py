"""Training the demo checkpoints' towers and adapter on the synthetic world: `tessera models train-demo`."""
