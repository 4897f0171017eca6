package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// apiError is an error in OpenAI's JSON shape:
// {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
	retry   int     // seconds for Retry-After, 0 for none
}

func (e *apiError) Error() string { return e.Message }

func str(s string) *string { return &s }

// invalid is a 400 naming the offending parameter ("" for the body).
func invalid(param, format string, args ...any) *apiError {
	e := &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error"}
	if param != "" {
		e.Param = str(param)
	}
	return e
}

func modelNotFound(name string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: str("model"), Code: str("model_not_found"),
		Message: fmt.Sprintf("The model `%s` does not exist.", name)}
}

func unauthorized() *apiError {
	return &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: str("invalid_api_key"),
		Message: "Incorrect or missing API key. Send it as 'Authorization: Bearer KEY'."}
}

func tooLarge(limit int64) *apiError {
	return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
		Message: fmt.Sprintf("Request body is larger than %d bytes.", limit)}
}

func queueFull() *apiError {
	return &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: str("queue_full"),
		Message: "The server's waiting queue is full; retry later.", retry: 1}
}

func draining() *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "service_unavailable", Code: str("draining"),
		Message: "The server is shutting down and accepts no new requests.", retry: 5}
}

func internal(err error) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Type: "internal_error", Message: err.Error()}
}

func notFound(path string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Message: fmt.Sprintf("No route for %s.", path)}
}

func methodNotAllowed(method, path string) *apiError {
	return &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Message: fmt.Sprintf("%s is not allowed on %s.", method, path)}
}

// writeError writes e as JSON.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retry))
	}
	writeJSON(w, e.Status, struct {
		Error *apiError `json:"error"`
	}{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
