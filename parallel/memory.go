package parallel

import "github.com/gearboxlm/gearbox/model"

// WeightElems is the number of weight elements global rank r holds under
// placement l: its TP slice of every split tensor in its stage (KV-head rows
// replicated when the slice needs a shared KV head), the vocabulary slice of
// the embedding (first stage) and LM head (last stage, once when tied),
// and every replicated tensor of its stage; under SiDP (l.FFN pooled) the
// gate, up and down slices only of the layers its replica owns. The
// engine's shards hold exactly this (tested), and the simulator's memory
// model uses it.
func (l Placement) WeightElems(cfg *model.Config, r int) int64 {
	p, c := l.Plan, l.Coords[r]
	h, d := int64(cfg.Hidden), int64(cfg.HeadDim)
	slice := SliceHeads(cfg, c.TP, p.SP, p.TP)
	q := int64(slice.QHi-slice.QLo) * d
	kv := int64(slice.KVHi-slice.KVLo) * d
	inter := int64(Even(cfg.Intermediate, p.TP, c.TP).Len())
	vocab := int64(Even(cfg.Vocab, p.TP, c.TP).Len())
	stage := p.Stage(c.PP, cfg.Layers)

	perLayer := 2*h + (q+2*kv)*h + h*q + 3*inter*h
	if cfg.AttentionBias {
		perLayer += q + 2*kv
	}
	if cfg.OutputBias {
		perLayer += h
	}
	if cfg.QKNorm {
		perLayer += 2 * d
	}
	if cfg.MLPBias {
		perLayer += 2*inter + h
	}
	n := int64(stage.Len()) * perLayer
	if l.FFN.Pooled() { // SiDP: no gate, up or down in the layers other replicas own
		n -= int64(stage.Len()-l.OwnedFFNLayers(cfg, r)) * 3 * inter * h
	}
	first, last := c.PP == 0, c.PP == p.PP-1
	if first {
		n += vocab * h
	}
	if last {
		n += h // final norm
		if !cfg.TieWordEmbeddings || !first {
			n += vocab * h
		}
	}
	return n
}

// KVElemsPerToken is the number of KV cache elements global rank r stores
// per token: keys and values of its head chunk's KV heads in its stage's
// layers.
func (l Placement) KVElemsPerToken(cfg *model.Config, r int) int64 {
	ch := ChunkHeads(cfg, l.Chunk(r), l.Plan.HeadShards())
	layers := l.Plan.Stage(l.Coords[r].PP, cfg.Layers).Len()
	return 2 * int64(layers) * int64(ch.KVHi-ch.KVLo) * int64(cfg.HeadDim)
}
