// Command example is a producer and a consumer of a "close order" delay queue on Rota:
// it makes a pull job (once), creates a task due in two seconds, consumes it, and prints
// the task's final status.
//
//	ROTA_SERVER=http://127.0.0.1:8080 ROTA_API_TOKEN=secret go run ./cmd/example
//
// Start a server first: ROTA_API_TOKEN=secret rota standalone.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	rota "github.com/rota-scheduler/rota/clients/go"
)

// Order is the payload of a "close order" task.
type Order struct {
	OrderID int `json:"order_id"`
}

func main() {
	server := os.Getenv("ROTA_SERVER")
	if server == "" {
		server = "http://127.0.0.1:8080"
	}
	client, err := rota.NewClient(server, os.Getenv("ROTA_API_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	// Stop on Ctrl-C, and after 30 s at most.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	// Once: a pull job (no plugin; consumers take its tasks). A 409: it exists already.
	job := map[string]any{
		"name": "close-order-q", "app": "shop", "schedule": map[string]any{"kind": "none"},
		"delivery": map[string]any{"kind": "pull"}, "max_attempts": 5,
	}
	if err := client.Do(ctx, http.MethodPost, "/api/v1/jobs", job, nil); err != nil && !errors.Is(err, rota.ErrConflict) {
		log.Fatal(err)
	}

	// Producer: close order 42 in two seconds. The key dedupes: creating it again
	// answers the same task (Created false).
	task, err := client.CreateTask(ctx, rota.NewTask{
		Job:     "close-order-q",
		Payload: Order{OrderID: 42},
		Delay:   2 * time.Second,
		Key:     "order-42",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("task %d is %s (new: %t)\n", task.ID, task.Status, task.Created)

	if task.Status == rota.TaskPending || task.Status == rota.TaskRunning || task.Status == rota.TaskFailed {
		// Consumer: returning nil acks the task, an error nacks it (retried per the
		// job's backoff); the lease is extended while the handler works.
		consumeCtx, done := context.WithCancel(ctx)
		err = client.Consume(consumeCtx, "close-order-q", func(ctx context.Context, item rota.Pulled) error {
			var order Order
			if err := item.DecodePayload(&order); err != nil {
				return fmt.Errorf("not an order: %w", err)
			}
			fmt.Printf("closing order %d (attempt %d)\n", order.OrderID, item.Attempt)
			// ... make it idempotent: UPDATE orders SET state='closed' WHERE id=? AND state='open'
			if item.Task == task.ID {
				done() // this example stops after its own task
			}
			return nil
		}, rota.ConsumeOptions{Consumer: "example", Wait: 5 * time.Second})
		done()
		if err != nil {
			log.Fatal(err)
		}
	}

	final, err := client.GetTask(context.Background(), task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("task %d is %s\n", final.ID, final.Status)
}
