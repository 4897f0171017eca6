package server

import (
	"errors"
	"net/http"

	"github.com/gearboxlm/gearbox/lora"
)

// loraRequest is the body of vLLM's /v1/load_lora_adapter and
// /v1/unload_lora_adapter.
type loraRequest struct {
	Name string `json:"lora_name"`
	Path string `json:"lora_path"`
}

var loraFields = func(k string) bool { return k == "lora_name" || k == "lora_path" || k == "load_inplace" }

// loadLoRA serves POST /v1/load_lora_adapter: the adapter in lora_path is
// read, checked and served as lora_name from the next request on. As
// vLLM, success is a plain-text line; a taken name or a bad adapter is a
// 400.
func (s *Server) loadLoRA(w http.ResponseWriter, r *http.Request, body []byte) {
	var req loraRequest
	if e := s.decode(body, &req, loraFields); e != nil {
		writeError(w, e)
		return
	}
	if req.Name == "" || req.Path == "" {
		writeError(w, invalid("lora_name", "both lora_name and lora_path must be provided"))
		return
	}
	a, err := s.opts.LoRA.Load(req.Name, req.Path)
	if errors.Is(err, lora.ErrExists) {
		writeError(w, invalid("lora_name", "The lora adapter '%s' has already been loaded.", req.Name))
		return
	}
	if err != nil {
		writeError(w, invalid("lora_path", "%v", err))
		return
	}
	s.opts.Logger.Info("loaded LoRA adapter", "name", a.Name, "path", a.Path, "rank", a.Rank, "bytes", a.Bytes())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("Success: LoRA adapter '" + req.Name + "' added successfully."))
}

// unloadLoRA serves POST /v1/unload_lora_adapter: requests naming
// lora_name are refused from now on (a 404, as for any unknown model);
// its running requests finish with it, and its weights are freed after
// them.
func (s *Server) unloadLoRA(w http.ResponseWriter, r *http.Request, body []byte) {
	var req loraRequest
	if e := s.decode(body, &req, loraFields); e != nil {
		writeError(w, e)
		return
	}
	if req.Name == "" {
		writeError(w, invalid("lora_name", "lora_name must be provided"))
		return
	}
	if err := s.opts.LoRA.Unload(req.Name); err != nil {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: str("lora_name"), Code: str("model_not_found"),
			Message: "The lora adapter '" + req.Name + "' cannot be found."})
		return
	}
	s.opts.Logger.Info("unloaded LoRA adapter", "name", req.Name)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("Success: LoRA adapter '" + req.Name + "' removed successfully."))
}
