package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// Log in, then pause a mirror unless it is already paused.
func Example() {
	ctx := context.Background()
	c := client.New("http://localhost:8112", "")
	login, err := c.Login(ctx, client.LoginRequest{Username: "admin", Password: "admin"})
	if err != nil {
		fmt.Println("login:", err)
		return
	}
	c.Token = login.Token
	_, err = c.PauseMirror(ctx, "orders")
	var apiErr *client.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict:
		fmt.Println("already paused or busy:", apiErr.Message)
	case client.IsConnectionError(err):
		fmt.Println("the service cannot be reached:", err)
	case err != nil:
		fmt.Println("pause:", err)
	}
}
