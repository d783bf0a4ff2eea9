"""What several test files share: parity with fastai's `TabularPandas` (parity.py), the drop-in checks (dropin.py),
host-sync counting (host_sync.py), the CPU stand-in for a GPU (fake_device.py) and the docs' code blocks
(recipes.py). Imported by module: `from helpers.parity import build_both`."""
