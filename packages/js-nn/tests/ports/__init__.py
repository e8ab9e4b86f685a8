"""Four pieces of real PyTorch model code ported to js (issue 12); see docs/porting.md."""
