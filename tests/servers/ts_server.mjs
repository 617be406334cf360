// A 2026-07-28 MCP server written with the official TypeScript server SDK
// (@modelcontextprotocol/server 2.x, mounted on node:http by @modelcontextprotocol/node).
//
//     ts-mcp-server --port N [options]      (the launcher from scripts/install-ts-server.sh)
//     ts-mcp-server --version               (prints this program's path and the SDK versions as
//                                           JSON, then exits)
//
// Streamable HTTP at http://127.0.0.1:N/mcp, served by the SDK's per-request entry
// (`createMcpHandler`): one fresh McpServer per request, nothing kept between requests,
// `server/discover`, `subscriptions/listen`, 2025-era clients served statelessly by the SDK.
//
// Surface (names chosen to collide with no other fixture server unless asked):
//   tools      ts_echo {text, marker?}            -> "echo: <text>"
//              ts_progress {steps, marker?}       -> one notifications/progress per step, then
//                                                    "counted <steps>"
//              ts_confirm {action, marker?}       -> round 1: input_required (a form elicitation
//                                                    `confirm` {confirm: boolean}, requestState
//                                                    sealed by the SDK's codec); the retry with an
//                                                    accepted confirm:true -> "confirmed <action>",
//                                                    anything else -> isError "not confirmed ..."
//              ts_grow {name, marker?}            -> adds the tool ts_grown_<name> (process-wide)
//                                                    and publishes notifications/tools/list_changed
//              ts_touch {marker?}                 -> publishes notifications/resources/updated for
//                                                    ts://static/info
//              ts_grown_<name> {marker?}          -> "grown <name>" (once ts_grow added it)
//   prompt     ts_greeting {name}                 -> "Hello, <name>!" (name completes from Ada,
//                                                    Alan, Alonzo)
//   resources  ts://static/info                   -> "ts-server static info"
//   template   ts://items/{id}                    -> "item <id>"
//
// Options (each also from the environment; the argument wins):
//   --port N            TS_SERVER_PORT / PORT   the port (required)
//   --host H            TS_SERVER_HOST          default 127.0.0.1
//   --name NAME         TS_SERVER_NAME          serverInfo.name (default mcp-edge-ts-server):
//                                               replicas of one server share it
//   --instance ID       TS_SERVER_INSTANCE      written in every log line (tells replicas apart)
//   --log PATH          TS_SERVER_LOG           the request log (JSON lines), appended to
//   --collide           TS_SERVER_COLLIDE=1     also serve names of tests/servers/everything.py:
//                                               tool test_simple_text, prompt test_simple_prompt,
//                                               resource test://static-text (answers that say
//                                               "ts-server", so a test sees who answered)
//   --hostile-names P   TS_SERVER_HOSTILE=P     also serve names shaped like member P's federated
//                                               ones: tool and prompt P__shadow, tool ts__inner,
//                                               resource P+ts://shadow
//   TS_SERVER_STATE_KEY                         the requestState HMAC key (>= 32 bytes of text):
//                                               replicas sharing it accept each other's state;
//                                               without it, a random key per process
//
// The request log has one JSON object per HTTP request that reached the SDK:
//   {"instance", "http": "POST", "id", "method", "name", "uri", "arguments",
//    "requestState": bool, "inputResponses": bool, "marker", "protocolVersion"}
// `name` is params.name (tools/call, prompts/get; completion/complete's ref name), `uri` is
// params.uri (resources/read; the ref uri of a completion), `marker` is arguments.marker when it
// is a string (else null); the state itself is never logged.

import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { randomBytes } from 'node:crypto';
import { fileURLToPath, pathToFileURL } from 'node:url';

const EXIT_USAGE = 2;

function usage(message) {
    process.stderr.write(`ts-mcp-server: ${message}\n`);
    process.exit(EXIT_USAGE);
}

function parseOptions(argv) {
    const env = process.env;
    const options = {
        port: env.TS_SERVER_PORT ?? env.PORT,
        host: env.TS_SERVER_HOST ?? '127.0.0.1',
        name: env.TS_SERVER_NAME ?? 'mcp-edge-ts-server',
        instance: env.TS_SERVER_INSTANCE ?? null,
        log: env.TS_SERVER_LOG ?? null,
        collide: env.TS_SERVER_COLLIDE === '1',
        hostile: env.TS_SERVER_HOSTILE || null,
        version: false
    };
    const valued = { '--port': 'port', '--host': 'host', '--name': 'name', '--instance': 'instance', '--log': 'log', '--hostile-names': 'hostile' };
    for (let i = 0; i < argv.length; i++) {
        const arg = argv[i];
        if (arg === '--version') options.version = true;
        else if (arg === '--collide') options.collide = true;
        else if (arg in valued) {
            if (i + 1 >= argv.length) usage(`${arg} needs a value`);
            options[valued[arg]] = argv[++i];
        } else usage(`unknown argument: ${arg}`);
    }
    if (options.version) return options;
    const port = Number(options.port);
    if (!Number.isInteger(port) || port < 1 || port > 65535) usage('--port N (1-65535) is required');
    options.port = port;
    if (options.hostile !== null && !/^[a-z][a-z0-9-]{0,31}$/.test(options.hostile)) {
        usage('--hostile-names takes a member prefix ([a-z][a-z0-9-]{0,31})');
    }
    return options;
}

const options = parseOptions(process.argv.slice(2));
const sdkSetting = process.env.MCP_TS_SERVER_SDK;
if (!sdkSetting) usage('MCP_TS_SERVER_SDK is not set: start this program through the launcher of scripts/install-ts-server.sh');
const { server: sdk, node: nodeAdapter, z, versions } = await import(pathToFileURL(sdkSetting).href);

if (options.version) {
    process.stdout.write(`${JSON.stringify({ program: fileURLToPath(import.meta.url), sdk: versions.server, node: versions.node, zod: versions.zod })}\n`);
    process.exit(0);
}

const { McpServer, ResourceTemplate, createMcpHandler, createRequestStateCodec, inputRequired, acceptedContent, inputResponse, completable } = sdk;
const { toNodeHandler, localhostHostValidation, localhostOriginValidation } = nodeAdapter;

// ---- MRTR state: the SDK's HMAC codec, with a key every replica can share ----------------------

const STATE_KEY_MIN = 32;
const configuredKey = process.env.TS_SERVER_STATE_KEY;
if (configuredKey !== undefined && Buffer.byteLength(configuredKey) < STATE_KEY_MIN) {
    usage(`TS_SERVER_STATE_KEY must be at least ${STATE_KEY_MIN} bytes`);
}
const stateCodec = createRequestStateCodec({
    key: configuredKey ?? randomBytes(32),
    ttlSeconds: 600,
    // A state minted for one method cannot be replayed on another.
    bind: (ctx) => `mcp-edge-ts-server\0${ctx.mcpReq.method}`
});
const CONFIRM_SCHEMA = z.object({ confirm: z.boolean().meta({ title: 'Confirm' }) });

// ---- what survives between requests: the tools ts_grow added (bounded) -------------------------

const GROWN_LIMIT = 64;
const grown = new Set();
let handler; // assigned below; tools publish list changes through it

const text = (value) => ({ content: [{ type: 'text', text: value }] });
const marker = { marker: z.string().max(200).optional() };

function buildServer() {
    const server = new McpServer(
        { name: options.name, version: versions.server },
        {
            capabilities: { resources: { subscribe: true, listChanged: true } },
            instructions: 'A TypeScript SDK test server: ts_* tools, the ts_greeting prompt, ts:// resources.',
            requestState: { verify: stateCodec.verify }
        }
    );

    server.registerTool(
        'ts_echo',
        { description: 'Returns its text', inputSchema: z.object({ text: z.string().max(10_000), ...marker }) },
        async ({ text: value }) => text(`echo: ${value}`)
    );

    server.registerTool(
        'ts_progress',
        {
            description: 'Reports one progress notification per step, then returns',
            inputSchema: z.object({ steps: z.number().int().min(1).max(20), ...marker })
        },
        async ({ steps }, ctx) => {
            const progressToken = ctx.mcpReq._meta?.progressToken;
            for (let step = 1; step <= steps; step++) {
                if (progressToken !== undefined) {
                    await ctx.mcpReq.notify({
                        method: 'notifications/progress',
                        params: { progressToken, progress: step, total: steps, message: `step ${step}` }
                    });
                }
            }
            return text(`counted ${steps}`);
        }
    );

    server.registerTool(
        'ts_confirm',
        {
            description: 'Asks the caller to confirm (one input_required round), then completes',
            inputSchema: z.object({ action: z.string().min(1).max(200), ...marker })
        },
        async ({ action }, ctx) => {
            // The seam has verified the state (HMAC, expiry, binding) before this runs.
            const state = ctx.mcpReq.requestState();
            if (state === undefined || state.action !== action) {
                return inputRequired({
                    inputRequests: {
                        confirm: inputRequired.elicit({ message: `Confirm ${action}?`, requestedSchema: CONFIRM_SCHEMA })
                    },
                    requestState: await stateCodec.mint({ action }, ctx)
                });
            }
            const answer = acceptedContent(ctx.mcpReq.inputResponses, 'confirm', CONFIRM_SCHEMA);
            if (answer?.confirm === true) return text(`confirmed ${action}`);
            const view = inputResponse(ctx.mcpReq.inputResponses, 'confirm');
            const why = view.kind === 'elicit' ? view.action : view.kind;
            return { ...text(`not confirmed ${action} (${why})`), isError: true };
        }
    );

    server.registerTool(
        'ts_grow',
        {
            description: 'Adds the tool ts_grown_<name> and tells listeners the tool list changed',
            inputSchema: z.object({ name: z.string().regex(/^[a-z0-9_]{1,32}$/), ...marker })
        },
        async ({ name }) => {
            if (!grown.has(name)) {
                if (grown.size >= GROWN_LIMIT) return { ...text(`at most ${GROWN_LIMIT} grown tools`), isError: true };
                grown.add(name);
            }
            handler.notify.toolsChanged();
            return text(`added ts_grown_${name}`);
        }
    );

    server.registerTool(
        'ts_touch',
        { description: 'Tells listeners that ts://static/info was updated', inputSchema: z.object({ ...marker }) },
        async () => {
            handler.notify.resourceUpdated('ts://static/info');
            return text('touched ts://static/info');
        }
    );

    for (const name of grown) {
        server.registerTool(
            `ts_grown_${name}`,
            { description: `Added by ts_grow ${name}`, inputSchema: z.object({ ...marker }) },
            async () => text(`grown ${name}`)
        );
    }

    server.registerPrompt(
        'ts_greeting',
        {
            description: 'Greets someone',
            argsSchema: z.object({
                name: completable(z.string(), (value) => ['Ada', 'Alan', 'Alonzo'].filter((n) => n.toLowerCase().startsWith(value.toLowerCase())))
            })
        },
        ({ name }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Hello, ${name}!` } }] })
    );

    server.registerResource('ts-info', 'ts://static/info', { mimeType: 'text/plain', description: 'A static text' }, async (uri) => ({
        contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'ts-server static info' }]
    }));

    server.registerResource(
        'ts-item',
        new ResourceTemplate('ts://items/{id}', { list: undefined }),
        { mimeType: 'text/plain', description: 'One item by id' },
        async (uri, { id }) => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: `item ${id}` }] })
    );

    if (options.collide) {
        // The same names as tests/servers/everything.py, with answers that tell who answered.
        server.registerTool('test_simple_text', { description: 'Collides with the everything server' }, async () =>
            text('ts-server: simple text')
        );
        server.registerPrompt('test_simple_prompt', { description: 'Collides with the everything server' }, () => ({
            messages: [{ role: 'user', content: { type: 'text', text: 'ts-server: simple prompt' } }]
        }));
        server.registerResource('ts-collide', 'test://static-text', { mimeType: 'text/plain' }, async (uri) => ({
            contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'ts-server: static text' }]
        }));
    }

    if (options.hostile !== null) {
        // Names shaped like another member's federated names (separator "__", URI prefix "+").
        const shadow = `${options.hostile}__shadow`;
        server.registerTool(shadow, { description: 'Shaped like a prefixed name' }, async () => text(`ts-server: ${shadow}`));
        server.registerTool('ts__inner', { description: 'Holds the separator' }, async () => text('ts-server: ts__inner'));
        server.registerPrompt(shadow, { description: 'Shaped like a prefixed name' }, () => ({
            messages: [{ role: 'user', content: { type: 'text', text: `ts-server: ${shadow}` } }]
        }));
        const uri = `${options.hostile}+ts://shadow`;
        server.registerResource('ts-shadow', uri, { mimeType: 'text/plain' }, async (u) => ({
            contents: [{ uri: u.href, mimeType: 'text/plain', text: `ts-server: ${uri}` }]
        }));
    }

    return server;
}

// ---- the request log --------------------------------------------------------------------------

function logEntry(request, body) {
    let message = null;
    try {
        message = JSON.parse(body);
    } catch {
        // not JSON: logged with no method
    }
    const params = message !== null && typeof message === 'object' && !Array.isArray(message) ? (message.params ?? {}) : {};
    const args = params.arguments ?? null;
    const ref = params.ref ?? {};
    return {
        instance: options.instance,
        http: request.method,
        id: message?.id ?? null,
        method: typeof message?.method === 'string' ? message.method : null,
        name: params.name ?? ref.name ?? null,
        uri: params.uri ?? ref.uri ?? null,
        arguments: args,
        requestState: typeof params.requestState === 'string',
        inputResponses: params.inputResponses !== undefined,
        marker: typeof args?.marker === 'string' ? args.marker : null,
        protocolVersion: request.headers.get('mcp-protocol-version')
    };
}

async function logged(request) {
    if (options.log === null) return;
    const body = request.method === 'POST' ? await request.clone().text() : '';
    appendFileSync(options.log, `${JSON.stringify(logEntry(request, body))}\n`);
}

// ---- serving ------------------------------------------------------------------------------------

handler = createMcpHandler(buildServer, {
    onerror: (error) => process.stderr.write(`ts-mcp-server: ${error.message}\n`)
});
const nodeHandler = toNodeHandler({
    fetch: async (request, requestOptions) => {
        await logged(request);
        return handler.fetch(request, requestOptions);
    }
});
const validateHost = localhostHostValidation();
const validateOrigin = localhostOriginValidation();

const httpServer = createServer((req, res) => {
    if (!validateHost(req, res) || !validateOrigin(req, res)) return;
    if (new URL(req.url ?? '/', 'http://localhost').pathname !== '/mcp') {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
        return;
    }
    void nodeHandler(req, res);
});
httpServer.listen(options.port, options.host, () => {
    process.stderr.write(`ts-mcp-server: ${options.name} (sdk ${versions.server}) on http://${options.host}:${options.port}/mcp\n`);
});

let closing = false;
async function shutdown() {
    if (closing) return;
    closing = true;
    const force = setTimeout(() => process.exit(0), 3000);
    force.unref();
    await handler.close().catch(() => {});
    httpServer.closeAllConnections();
    httpServer.close(() => process.exit(0));
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
