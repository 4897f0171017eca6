//go:build !amd64 || noasm

package tensor

// q8Tile returns the tile kernel of Q8_0 prefill: the portable one.
func q8Tile() q8TileFunc { return q8TileGo }
