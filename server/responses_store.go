package server

import (
	"container/list"
	"net/http"
	"sync"
)

// responseStore keeps the last responses in memory, for
// previous_response_id and GET /v1/responses/{id}: each with the
// conversation it ended (the turns it was given, less its instructions,
// and its own output as assistant turns). It holds at most max
// responses, forgetting the oldest first.
type responseStore struct {
	mu    sync.Mutex
	max   int
	byID  map[string]*list.Element
	order *list.List // of *storedResponse, newest at the back
}

type storedResponse struct {
	resp  responseObject
	turns []chatMessage
}

func newResponseStore(max int) *responseStore {
	return &responseStore{max: max, byID: map[string]*list.Element{}, order: list.New()}
}

func (st *responseStore) put(resp *responseObject, turns []chatMessage) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.byID[resp.ID] = st.order.PushBack(&storedResponse{resp: *resp, turns: turns})
	for st.order.Len() > st.max {
		oldest := st.order.Remove(st.order.Front()).(*storedResponse)
		delete(st.byID, oldest.resp.ID)
	}
}

func (st *responseStore) get(id string) (*storedResponse, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.byID[id]
	if !ok {
		return nil, false
	}
	return e.Value.(*storedResponse), true
}

func (st *responseStore) delete(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.byID[id]
	if ok {
		st.order.Remove(e)
		delete(st.byID, id)
	}
	return ok
}

// outputTurns are a response's output items as the chat turns that
// continue its conversation: its text an assistant turn, its calls that
// turn's tool_calls; its thinking is left out, as templates leave out
// past thinking.
func outputTurns(items []outputItem) []chatMessage {
	var text string
	var calls []toolCall
	for _, it := range items {
		switch it.Type {
		case "message":
			for _, p := range *it.Content {
				text += p.Text
			}
		case "function_call":
			calls = append(calls, toolCall{ID: it.CallID, Type: "function", Function: functionCall{Name: it.Name, Arguments: *it.Arguments}})
		}
	}
	if text == "" && len(calls) == 0 {
		return nil
	}
	turn := textMessage("assistant", text)
	turn.ToolCalls = calls
	return []chatMessage{turn}
}

// responseByID serves GET and DELETE /v1/responses/{id}.
func (s *Server) responseByID(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if s.responsesStore == nil {
			writeError(w, responseNotFound(id))
			return
		}
		if stored, ok := s.responsesStore.get(id); ok {
			writeJSON(w, http.StatusOK, stored.resp)
			return
		}
	case http.MethodDelete:
		if s.responsesStore != nil && s.responsesStore.delete(id) {
			writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response", "deleted": true})
			return
		}
	default:
		writeError(w, methodNotAllowed(r.Method, r.URL.Path))
		return
	}
	writeError(w, responseNotFound(id))
}

func responseNotFound(id string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Message: "No response found with id '" + id + "' (this server keeps the last --responses-store responses, in memory).", Param: str("response_id"), Code: str("not_found")}
}
