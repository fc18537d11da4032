module github.com/rota-scheduler/rota/clients/go

go 1.21
