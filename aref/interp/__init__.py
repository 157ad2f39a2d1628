"""The reference interpreters: `tile` runs Tile IR op by op on torch tensors (the semantics every later
stage must agree with); `channels` runs a warp-specialized kernel's groups through their aref channels."""
