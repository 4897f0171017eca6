// Package tokenizer turns text into token ids and back for models whose
// tokenizer is a Hugging Face tokenizer.json with a BPE model: byte-level
// BPE with a regex pre-tokenizer (GPT-2, Llama 3, Qwen2/Qwen3) and
// SentencePiece-style BPE with "▁" spaces and <0xNN> byte fallback
// (Llama 2, Mistral, TinyLlama, stories260K).
//
// Its one job is to give the ids Hugging Face tokenizers gives, and text
// that streams exactly: Encode follows tokenizers' pipeline (added tokens,
// normalizer, pre-tokenizer, BPE model, post-processor template), and
// Decode and Decoder follow its decoders. The invariant it keeps: the text a
// Decoder streams after a prompt is, token by token, Decode(prompt +
// generated so far) less Decode(prompt), never holding half a UTF-8
// character; so a server can stream exactly the text a full decode would
// give.
//
// Read first: tokenizer.go (the API and Encode's pipeline), bpe.go (the
// merge loop and word cache) and decode.go (Decode and Decoder).
//
// Encoding, in order:
//
//  1. Added tokens (tokenizer.json added_tokens: special ones such as
//     "<|im_start|>" or "<s>" and others such as "<think>") are found in the
//     raw text, leftmost and longest first, honouring lstrip, rstrip and
//     single_word; ones marked normalized are found after normalization.
//  2. Each span of text between them is normalized (NFC, NFD, Prepend,
//     Replace, Strip, Sequence) and pre-tokenized (Split with a regex or
//     string and any split behaviour, ByteLevel, Metaspace, Digits,
//     Sequence). The GPT-2, Llama 3 and Qwen2 split regexes run on
//     hand-written matchers, checked against regexp2; other regexes run on
//     regexp2.
//  3. Each piece is merged by BPE rank (ties leftmost), with ignore_merges,
//     byte_fallback, unk_token and fuse_unk as in tokenizers; results for
//     short pieces are cached.
//  4. Encode(text, true) adds the ids of the post-processor's
//     TemplateProcessing around the sequence; an explicit add_bos_token or
//     add_eos_token in tokenizer_config.json overrides it, as transformers'
//     Llama tokenizers do. Without a template and without those keys nothing
//     is added (so the Llama 3 tokenizer.json whose post-processor is
//     ByteLevel gets no BOS: the chat template writes <|begin_of_text|>).
//
// Decoding supports the ByteLevel and Metaspace decoders and Sequences of
// Replace, ByteFallback, Fuse and Strip. Ill-formed UTF-8 becomes U+FFFD per
// maximal ill-formed subpart (as TextDecoder and String::from_utf8_lossy
// do; tokenizers' ByteFallback instead replaces a whole run of byte tokens).
// Added tokens decode to their content. transformers'
// clean_up_tokenization_spaces is not applied, so byte-level round trips
// are exact.
//
// Anything else in a tokenizer.json (a WordPiece or Unigram model, a
// BertNormalizer, ...) is an error that names the unsupported type.
//
// A Tokenizer is immutable and safe for concurrent use; a Decoder serves one
// stream. Tests compare ids and decoded text with transformers.js on a
// corpus (testdata/fetch.sh installs it, see reference_test.go).
package tokenizer
