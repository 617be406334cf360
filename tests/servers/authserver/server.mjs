// The tests' OAuth 2.0 / OpenID Connect authorization server: oidc-provider (OpenID-certified),
// configured from a JSON file, with the RFC 8693 token-exchange grant (exchange.mjs) and plain
// sign-in and consent pages (pages.mjs).
//
//     authserver --config PATH     (the launcher from scripts/install-authserver.sh)
//     authserver --version         (prints this program's path and the package versions as JSON)
//
// The configuration (tests/support/authserver.py writes it; every key but `port` has a default):
//   port                 the port on 127.0.0.1 (the issuer is http://127.0.0.1:<port>)
//   log                  the request log: one JSON object per request, appended to
//   control_secret       the value of the X-Test-Control header the /test/ endpoints require
//   accounts             {user: {password, claims}}: who can sign in
//   clients              oidc-provider client metadata, plus `allowed_audiences` (a list: the only
//                        targets the client may get tokens for; absent: any)
//   scopes               the scopes every resource server defines (space separated)
//   resources            {indicator: {scope, ttl}}: resource servers with their own scopes/TTL
//   accept_any_resource  whether a target not in `resources` (a resource URI or an audience
//                        name) is a resource server too, with `scopes` (default true)
//   access_token_ttl, refresh_token_ttl, authorization_code_ttl      seconds
//   exchange             {ttl, subject_audience, trusted_issuers: [{issuer, jwks | jwks_uri}]}
//   max_lifetime         seconds after which the process exits on its own
//
// Endpoints besides oidc-provider's own (discovery at /.well-known/openid-configuration and
// /.well-known/oauth-authorization-server, /auth, /token, /jwks, /token/introspection,
// /token/revocation, /me, /session/end):
//   /interaction/...        the sign-in and consent pages (pages.mjs)
//   POST /test/token        {account, audience?, scope?, ttl?, client_id?, marker?} -> a user's
//                           access token as the code flow would issue it (a JWT for `audience`,
//                           else opaque), without a browser
//   POST /test/revoke       {account, client_id?} -> revokes the grants the user consented to
//                           (and every token issued from them): {"revoked": n}
//   Both need X-Test-Control: <control_secret>; JSON bodies; no other route takes JSON.
//
// The request log records, per request: method, path, the provider's route name, status,
// grant_type, client_id, the client's auth method, the OAuth error code, the target
// (resource / audience), scope, the marker (X-Test-Marker header, else a `marker` query or body
// parameter), the user name of a sign-in, and for a token exchange the subject's sub, iss and
// test_marker claim, the actor's sub and whether a token was issued. Never a secret, token,
// code, verifier, assertion or password.

import { appendFileSync, readFileSync } from 'node:fs';
import { createHash, generateKeyPairSync, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { GRANT_TYPE, registerTokenExchange } from './exchange.mjs';
import { interactions } from './pages.mjs';

const EXIT_USAGE = 2;
const JSON_LIMIT = 16 * 1024;
const DEFAULTS = {
    accounts: {},
    clients: [],
    scopes: 'mcp:tools mcp:read mcp:write',
    resources: {},
    accept_any_resource: true,
    access_token_ttl: 600,
    refresh_token_ttl: 86400,
    authorization_code_ttl: 60,
    exchange: { ttl: 300, subject_audience: null, trusted_issuers: [] },
    max_lifetime: 3600
};

function usage(message) {
    process.stderr.write(`authserver: ${message}\n`);
    process.exit(EXIT_USAGE);
}

async function loadDeps() {
    const entry = process.env.AUTHSERVER_DEPS;
    if (!entry) usage('AUTHSERVER_DEPS is not set: run me through the launcher of scripts/install-authserver.sh');
    return import(pathToFileURL(entry).href);
}

function readConfig(argv) {
    const at = argv.indexOf('--config');
    if (at < 0 || !argv[at + 1]) usage('usage: authserver --config PATH | --version');
    let raw;
    try {
        raw = JSON.parse(readFileSync(argv[at + 1], 'utf8'));
    } catch (err) {
        usage(`cannot read the configuration ${argv[at + 1]}: ${err.message}`);
    }
    const config = { ...DEFAULTS, ...raw, exchange: { ...DEFAULTS.exchange, ...(raw.exchange ?? {}) } };
    if (!Number.isInteger(config.port) || config.port <= 0) usage('the configuration needs a port');
    return config;
}

/** One RS256 signing key (oidc-provider signs ID tokens and JWT access tokens with it). */
function signingKeys() {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const jwk = { ...privateKey.export({ format: 'jwk' }), kid: `rsa-${randomUUID().slice(0, 8)}`, alg: 'RS256', use: 'sig' };
    const { d, p, q, dp, dq, qi, ...pub } = jwk;
    return { keys: [jwk], public: { keys: [pub] } };
}

const sameSecret = (a, b) =>
    timingSafeEqual(createHash('sha256').update(String(a)).digest(), createHash('sha256').update(String(b)).digest());

async function readJson(ctx) {
    if (!ctx.is('application/json')) ctx.throw(415, 'a JSON body is required');
    const chunks = [];
    let size = 0;
    for await (const chunk of ctx.req) {
        size += chunk.length;
        if (size > JSON_LIMIT) ctx.throw(413, 'body too large');
        chunks.push(chunk);
    }
    try {
        return JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
        ctx.throw(400, 'the body is not JSON');
    }
}

function requestLog(path) {
    const pick = (...values) => values.find((v) => typeof v === 'string' && v !== '');
    return async function logRequests(ctx, next) {
        try {
            await next();
        } finally {
            if (path) {
                const body = ctx.oidc?.body ?? {};
                const query = ctx.query ?? {};
                const client = ctx.oidc?.client;
                const entry = {
                    ts: new Date().toISOString(),
                    method: ctx.method,
                    path: ctx.path,
                    route: ctx.oidc?.route ?? null,
                    status: ctx.status,
                    grant_type: pick(body.grant_type) ?? null,
                    client_id: client?.clientId ?? pick(body.client_id, query.client_id) ?? null,
                    auth_method: ctx.oidc?.route === 'token' ? (client?.clientAuthMethod ?? null) : null,
                    error: ctx.body && typeof ctx.body === 'object' && !Buffer.isBuffer(ctx.body) ? (ctx.body.error ?? null) : null,
                    target: pick(body.resource, body.audience, query.resource) ?? null,
                    scope: pick(body.scope, query.scope) ?? null,
                    marker: pick(ctx.get('x-test-marker'), query.marker, body.marker, ctx.state.marker) ?? null,
                    ...(ctx.state.account !== undefined ? { account: ctx.state.account } : {}),
                    ...(ctx.state.interaction ? { interaction: ctx.state.interaction } : {}),
                    ...(ctx.state.exchange ? { exchange: ctx.state.exchange } : {}),
                    ...(ctx.state.test ? { test: ctx.state.test } : {})
                };
                appendFileSync(path, `${JSON.stringify(entry)}\n`);
            }
        }
    };
}

async function main() {
    const argv = process.argv.slice(2);
    const deps = await loadDeps();
    if (argv.includes('--version')) {
        process.stdout.write(
            `${JSON.stringify({ program: fileURLToPath(import.meta.url), node: process.version, ...deps.versions })}\n`
        );
        return;
    }
    const { oidc, jose } = deps;
    const config = readConfig(argv);
    const issuer = `http://127.0.0.1:${config.port}`;
    const keys = signingKeys();
    const accounts = config.accounts;
    const extraClaims = new WeakMap(); // token model -> the claims it carries besides oidc-provider's

    // Per-client policy kept beside (not inside) oidc-provider's client metadata.
    const allowedAudiences = new Map();
    const clientKeySets = new Map();
    const clients = config.clients.map(({ allowed_audiences: allowed, ...metadata }) => {
        if (allowed) allowedAudiences.set(metadata.client_id, new Set(allowed));
        if (metadata.jwks) {
            clientKeySets.set(metadata.client_id, { issuer: metadata.client_id, keySet: jose.createLocalJWKSet(metadata.jwks) });
        }
        return metadata;
    });
    const trustedIssuers = new Map(
        config.exchange.trusted_issuers.map(({ issuer: iss, jwks, jwks_uri: uri }) => [
            iss,
            jwks ? jose.createLocalJWKSet(jwks) : jose.createRemoteJWKSet(new URL(uri), { timeoutDuration: 5000 })
        ])
    );

    /** The resource server a target names for this client, or undefined (refused). */
    function resourceServer(target, client) {
        const allowed = allowedAudiences.get(client.clientId);
        if (allowed && !allowed.has(target)) return undefined;
        const known = config.resources[target];
        if (known) {
            return {
                scope: known.scope ?? config.scopes,
                accessTokenTTL: known.ttl ?? config.access_token_ttl,
                exchangeTTL: known.ttl ?? config.exchange.ttl
            };
        }
        if (!config.accept_any_resource) return undefined;
        return { scope: config.scopes, accessTokenTTL: config.access_token_ttl, exchangeTTL: config.exchange.ttl };
    }

    const provider = new oidc.Provider(issuer, {
        clients,
        jwks: { keys: keys.keys },
        cookies: { keys: [randomBytes(32).toString('base64url')] },
        async findAccount(_ctx, id) {
            if (!Object.hasOwn(accounts, id)) return undefined;
            return {
                accountId: id,
                async claims() {
                    return { sub: id, ...(accounts[id].claims ?? {}) };
                }
            };
        },
        claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
        // oidc-provider sets a token's extra claims from this hook only (exchange.mjs and
        // /test/token hand theirs over in `extraClaims`).
        extraTokenClaims: async (_ctx, token) => extraClaims.get(token),
        responseTypes: ['code'],
        scopes: ['openid', 'offline_access', ...config.scopes.split(' ').filter(Boolean)],
        pkce: { required: () => true },
        // Every client allowed refresh tokens gets one (no offline_access dance).
        issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
        // A grant outlives the browser session it was given in (another user signing in on that
        // browser, or the session ending, leaves it alone), as a grant to a gateway must.
        expiresWithSession: async () => false,
        ttl: {
            AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? config.access_token_ttl,
            ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? config.access_token_ttl,
            AuthorizationCode: config.authorization_code_ttl,
            RefreshToken: config.refresh_token_ttl,
            IdToken: config.access_token_ttl,
            Interaction: 600,
            Session: 3600,
            Grant: config.refresh_token_ttl
        },
        features: {
            devInteractions: { enabled: false },
            clientCredentials: { enabled: true },
            introspection: {
                enabled: true,
                // Any authenticated confidential client may introspect; a public one only its own.
                allowedPolicy: async (ctx, client, token) =>
                    client.clientAuthMethod !== 'none' || token.clientId === ctx.oidc.client.clientId
            },
            revocation: {
                enabled: true,
                allowedPolicy: async (_ctx, client, token) => token.clientId === client.clientId
            },
            resourceIndicators: {
                enabled: true,
                defaultResource: async (_ctx, _client, oneOf) => oneOf,
                useGrantedResource: async () => true,
                async getResourceServerInfo(_ctx, indicator, client) {
                    const server = resourceServer(indicator, client);
                    if (!server) throw new oidc.errors.InvalidTarget();
                    return {
                        scope: server.scope,
                        accessTokenFormat: 'jwt',
                        accessTokenTTL: server.accessTokenTTL,
                        jwt: { sign: { alg: 'RS256' } }
                    };
                }
            }
        },
        async renderError(ctx, out) {
            ctx.type = 'html';
            const text = (v) => String(v).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
            ctx.body = `<!DOCTYPE html><html><head><title>Error</title></head><body><main id="page-error"><h1>Error</h1>
<p id="error">${text(out.error)}</p><p id="error-description">${text(out.error_description ?? '')}</p></main></body></html>`;
        }
    });

    // Which grants a consent saved, so /test/revoke can take them back.
    const grants = new Map(); // "account\0client" -> Set(grantId)
    const grantKey = (account, clientId) => `${account}\u0000${clientId}`;
    function onGrant(account, clientId, grantId) {
        const key = grantKey(account, clientId);
        if (!grants.has(key)) grants.set(key, new Set());
        grants.get(key).add(grantId);
    }

    async function testRoutes(ctx, next) {
        if (!ctx.path.startsWith('/test/')) return next();
        ctx.state.test = ctx.path.slice('/test/'.length);
        if (ctx.method !== 'POST') ctx.throw(405);
        if (!config.control_secret || !sameSecret(ctx.get('x-test-control'), config.control_secret)) ctx.throw(403);
        const body = await readJson(ctx);
        const account = body.account;
        if (typeof account !== 'string' || !Object.hasOwn(accounts, account)) ctx.throw(400, 'unknown account');
        ctx.state.account = account;
        if (typeof body.marker === 'string') ctx.state.marker = body.marker;
        ctx.set('cache-control', 'no-store');
        if (ctx.path === '/test/token') {
            const clientId = body.client_id ?? clients[0]?.client_id;
            const client = await provider.Client.find(String(clientId));
            if (!client) ctx.throw(400, 'unknown client');
            const token = new provider.AccessToken({
                accountId: account,
                client,
                scope: body.scope || undefined,
                gty: 'authorization_code',
                ...(body.ttl ? { expiresIn: Number(body.ttl) } : {})
            });
            if (typeof body.marker === 'string') extraClaims.set(token, { test_marker: body.marker });
            if (body.audience) {
                const server = resourceServer(body.audience, client);
                if (!server) ctx.throw(400, 'the client may not get a token for that audience');
                token.resourceServer = {
                    audience: body.audience,
                    scope: server.scope,
                    accessTokenFormat: 'jwt',
                    accessTokenTTL: body.ttl ? Number(body.ttl) : server.accessTokenTTL,
                    jwt: { sign: { alg: 'RS256' } }
                };
            }
            const value = await token.save();
            ctx.body = { access_token: value, token_type: 'Bearer', expires_in: token.expiration, scope: body.scope ?? '' };
            return;
        }
        if (ctx.path === '/test/revoke') {
            let revoked = 0;
            for (const [key, ids] of grants) {
                const [who, clientId] = key.split('\u0000');
                if (who !== account || (body.client_id && body.client_id !== clientId)) continue;
                for (const grantId of ids) {
                    const grant = await provider.Grant.find(grantId);
                    await Promise.all([
                        grant?.destroy(),
                        provider.AccessToken.revokeByGrantId(grantId),
                        provider.RefreshToken.revokeByGrantId(grantId),
                        provider.AuthorizationCode.revokeByGrantId(grantId)
                    ]);
                    revoked += 1;
                }
                grants.delete(key);
            }
            ctx.body = { revoked };
            return;
        }
        ctx.throw(404);
    }

    provider.use(requestLog(config.log));
    provider.use(testRoutes);
    provider.use(interactions(provider, oidc, accounts, onGrant));
    registerTokenExchange(provider, oidc, jose, {
        config,
        ownKeySet: jose.createLocalJWKSet(keys.public),
        trustedIssuers,
        clientKeySets,
        resourceServer,
        extraClaims
    });

    const server = provider.listen(config.port, '127.0.0.1', () => {
        process.stdout.write(`authserver: listening on ${issuer} (token exchange: ${GRANT_TYPE})\n`);
    });
    server.headersTimeout = 10_000;
    server.requestTimeout = 30_000;
    const stop = () => {
        server.close(() => process.exit(0));
        server.closeAllConnections();
        setTimeout(() => process.exit(0), 2000).unref();
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    // Bounded: a process nobody stopped ends by itself.
    setTimeout(() => {
        process.stderr.write(`authserver: max_lifetime (${config.max_lifetime} s) reached, exiting\n`);
        stop();
    }, config.max_lifetime * 1000).unref();
}

main().catch((err) => {
    process.stderr.write(`authserver: ${err?.stack ?? err}\n`);
    process.exit(1);
});
