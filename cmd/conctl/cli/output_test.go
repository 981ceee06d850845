package cli

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWriteErrorListsFieldErrors: each field error gets its own line, except
// the only one when the detail already says it (location and message).
func TestWriteErrorListsFieldErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  *APIError
		want string
	}{
		{
			name: "the detail says the only field error",
			err: &APIError{StatusCode: 422, Detail: "body.name: must be short",
				Errors: []ProblemError{{Location: "body.name", Message: "must be short"}}},
			want: "Error: 422 Unprocessable Entity: body.name: must be short\n",
		},
		{
			name: "the detail is a summary",
			err: &APIError{StatusCode: 422, Detail: "the document is invalid",
				Errors: []ProblemError{{Location: "body.name", Message: "must be short"}}},
			want: "Error: 422 Unprocessable Entity: the document is invalid\n  - body.name: must be short\n",
		},
		{
			name: "several field errors",
			err: &APIError{StatusCode: 422, Detail: "body.a: bad",
				Errors: []ProblemError{{Location: "body.a", Message: "bad"}, {Location: "body.b", Message: "worse"}}},
			want: "Error: 422 Unprocessable Entity: body.a: bad\n  - body.a: bad\n  - body.b: worse\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			writeError(&b, "", tt.err)
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			b.Reset()
			writeError(&b, "", errors.New("plain"))
			if b.String() != "Error: plain\n" {
				t.Errorf("plain error: %q", b.String())
			}
		})
	}
}
