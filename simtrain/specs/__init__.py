"""Specifications: model, GPU, parallel layout; strict loaders and presets."""
