package main

// The client's command tree (spf13/cobra): every command with its usage,
// arguments, description and examples for --help, its flags, and shell
// completion (pgmirror completion bash|zsh|fish|powershell). The commands
// themselves are in cli_commands.go and cli_verify.go.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// rootCommand returns the command tree of the pgmirror binary as the client
// sees it: the client commands, and the service's own commands (handled
// by run before the client is involved) for help and completion.
func (c *cli) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "pgmirror",
		Short: "PostgreSQL-to-PostgreSQL change data capture: the service and its command-line client",
		Long: `pgmirror runs the replication service (pgmirror serve) and is also its command-line client:
login, logout, peers, mirrors and logs talk to a running service through its REST API, print
tables for people and the API's own JSON for scripts (--json), and end with exit codes that
scripts can rely on (0 success, 1 the service answered with an error, 2 usage error,
3 not logged in, 4 the service could not be reached, 5 a verification found differences).

The service reads its configuration from SERVICE_* environment variables (docs/configuration.md);
pgmirror demo -h lists the demo's flags. The client is described in docs/cli.md.`,
		Example: `  pgmirror serve
  pgmirror login --url http://localhost:8112 --user admin
  pgmirror mirrors list
  pgmirror mirrors get orders --help`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErrorf("%v; see %s --help", err, cmd.CommandPath())
	})
	pf := root.PersistentFlags()
	pf.StringVar(&c.url, "url", "", "service URL (default: $SERVICE_URL, else the URL of the last login)")
	pf.BoolVar(&c.json, "json", false, "print the API's JSON instead of a table")
	pf.StringVarP(&c.output, "output", "o", "", "output format: table (the default) or json (same as --json)")
	pf.BoolVar(&c.noHeaders, "no-headers", false, "print tables without their header row")
	_ = root.RegisterFlagCompletionFunc("output", fixedCompletions("table", "json"))

	root.AddCommand(c.loginCommand(), c.logoutCommand(), c.peersCommand(), c.mirrorsCommand(), c.logsCommand())
	for _, s := range []struct{ name, short string }{
		{"serve", "Run the REST API and the replication workers (the default command)"},
		{"migrate", "Apply the catalog migrations and exit"},
		{"rotate-key", "Re-encrypt the catalog's secrets with the current key"},
		{"gen-key", "Print a new catalog encryption key"},
		{"demo", "Start a demonstration: two databases, a mirror, the console"},
		{"healthcheck", "Exit 0 when the local service answers /health (for container health checks)"},
		{"version", "Print the version and exit"},
	} {
		root.AddCommand(&cobra.Command{
			Use: s.name, Short: s.short, DisableFlagParsing: true,
			ValidArgsFunction: cobra.NoFileCompletions,
			Long:              s.short + ".\nThe service reads its configuration from SERVICE_* environment variables: see docs/configuration.md.",
			RunE: func(cmd *cobra.Command, args []string) error {
				return run(cmd.Context(), append([]string{cmd.Name()}, args...), c.getenv, c.stdout)
			},
		})
	}
	// completion bash|zsh|fish|powershell is cobra's; an unknown shell is a
	// usage error like an unknown subcommand anywhere else.
	root.InitDefaultCompletionCmd()
	for _, cmd := range root.Commands() {
		if cmd.Name() == "completion" {
			cmd.Args = cobra.ArbitraryArgs
			cmd.Example = "  source <(pgmirror completion bash)\n  pgmirror completion zsh > \"${fpath[1]}/_pgmirror\"\n" +
				"  pgmirror completion fish > ~/.config/fish/completions/pgmirror.fish"
			cmd.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) == 0 {
					fmt.Fprint(c.stderr, cmd.UsageString())
					return usageErrorf("completion: name a shell: bash, zsh, fish or powershell")
				}
				return usageErrorf("completion: %q is not a shell pgmirror completes; give bash, zsh, fish or powershell", args[0])
			}
		}
	}
	return root
}

// spec describes one client command for newCommand.
type spec struct {
	use, short, long, example string
	// minArgs and maxArgs bound the positional arguments.
	minArgs, maxArgs int
	// complete completes the first positional argument (mirror or peer
	// names); nil completes nothing.
	complete cobra.CompletionFunc
}

// newCommand returns a client command that checks its arguments and the
// output format, then runs run. An error of run without an exit code of
// its own ends the process with code 1.
func (c *cli) newCommand(s spec, run func(ctx context.Context, args []string) error) *cobra.Command {
	cmd := &cobra.Command{
		Use: s.use, Short: s.short, Long: s.long, Example: s.example,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) >= s.minArgs && len(args) <= s.maxArgs {
				return nil
			}
			if s.maxArgs == 0 {
				return usageErrorf("%s takes no arguments; usage: %s", cmd.CommandPath(), cmd.UseLine())
			}
			return usageErrorf("usage: %s (see %s --help)", cmd.UseLine(), cmd.CommandPath())
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch strings.ToLower(c.output) {
			case "", "table":
			case "json":
				c.json = true
			default:
				return usageErrorf("--output %q: give table or json", c.output)
			}
			err := run(cmd.Context(), args)
			var ee *exitError
			if err != nil && !errors.As(err, &ee) {
				err = &exitError{code: exitAPIError, err: err}
			}
			return err
		},
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	if s.complete != nil {
		cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return s.complete(cmd, args, toComplete)
		}
	}
	return cmd
}

// groupCommand is peers or mirrors: it only holds subcommands. Without one,
// or with an unknown one, it is a usage error (exit 2).
func (c *cli) groupCommand(use, short, long, example string, subcommands ...*cobra.Command) *cobra.Command {
	group := &cobra.Command{
		Use: use, Short: short, Long: long, Example: example,
		Args:                       cobra.ArbitraryArgs,
		SuggestionsMinimumDistance: 1,
		ValidArgsFunction:          cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				fmt.Fprint(c.stderr, cmd.UsageString())
				return usageErrorf("%s: a subcommand is required; see pgmirror %s --help", use, use)
			}
			if args[0] == "help" {
				return cmd.Help()
			}
			hint := ""
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				hint = fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
			}
			return usageErrorf("%s: unknown subcommand %q%s; see pgmirror %s --help", use, args[0], hint, use)
		},
	}
	group.AddCommand(subcommands...)
	return group
}

// fixedCompletions completes a flag from a fixed list of values.
func fixedCompletions(values ...string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeMirrors completes a mirror name from the service (with the saved
// login); it completes nothing when the service does not answer in time.
func (c *cli) completeMirrors(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
	defer cancel()
	var names []cobra.Completion
	if api, err := c.api(ctx); err == nil {
		if mirrors, err := api.ListMirrors(ctx); err == nil {
			for _, m := range mirrors {
				names = append(names, cobra.CompletionWithDesc(escapeControls(m.Name, false), escapeControls(m.Status, false)))
			}
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completePeers completes a peer name from the service, like completeMirrors.
func (c *cli) completePeers(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
	defer cancel()
	var names []cobra.Completion
	if api, err := c.api(ctx); err == nil {
		if peers, err := api.ListPeers(ctx); err == nil {
			for _, p := range peers {
				names = append(names, cobra.CompletionWithDesc(escapeControls(p.Name, false),
					escapeControls(fmt.Sprintf("%s:%d/%s", p.Host, p.Port, p.Database), false)))
			}
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// logLevels are the levels of --level, as the API knows them.
var logLevels = []string{"DEBUG", "INFO", "WARN", "ERROR"}
