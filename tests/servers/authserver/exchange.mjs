// The RFC 8693 token-exchange grant of the test authorization server, registered with
// `provider.registerGrantType` as oidc-provider's documentation shows ("Custom Grant Types").
//
// A request names a subject token (and optionally an actor token) and ONE target, given as
// `audience` or `resource` (RFC 8707); it gets a JWT access token for that target, signed with
// the server's keys, whose `sub` is the subject's, whose `client_id` is the exchanging client, and
// which carries `act: {sub[, act]}` when an actor token was given. What is refused:
//   - a subject or actor token this server did not issue and no trusted issuer signed, expired,
//     revoked, or for the wrong audience (exchange.subject_audience)      -> invalid_grant
//   - a token type other than access_token / jwt                          -> invalid_request
//   - no target, two different targets, a target the client may not use   -> invalid_target
//   - a scope the target does not define                                  -> invalid_scope
//   - a client without the grant in its grant_types                       -> invalid_request
//     ("requested grant type is not allowed for this client": oidc-provider's own check)

export const GRANT_TYPE = 'urn:ietf:params:oauth:grant-type:token-exchange';
export const TOKEN_TYPES = {
    access_token: 'urn:ietf:params:oauth:token-type:access_token',
    jwt: 'urn:ietf:params:oauth:token-type:jwt',
    refresh_token: 'urn:ietf:params:oauth:token-type:refresh_token',
    id_token: 'urn:ietf:params:oauth:token-type:id_token'
};
const PARAMETERS = [
    'audience',
    'resource',
    'scope',
    'requested_token_type',
    'subject_token',
    'subject_token_type',
    'actor_token',
    'actor_token_type'
];
const DUPLICATES = ['audience', 'resource'];
const JWT_ALGORITHMS = ['RS256', 'PS256', 'ES256', 'EdDSA'];
const CLOCK_TOLERANCE = 5; // seconds

const asList = (value) => (value === undefined ? [] : Array.isArray(value) ? value : [value]);
const looksLikeJwt = (token) => /^[\w-]+\.[\w-]+\.[\w-]*$/.test(token);

/** Register the grant; `state` is the server's (config, keys, the trusted issuers' key sets). */
export function registerTokenExchange(provider, oidc, jose, state) {
    const { errors } = oidc;

    function fail(Kind, description) {
        const error = Kind === errors.InvalidGrant ? new Kind() : new Kind(description);
        error.error_description = description;
        return error;
    }

    /** The claims of a JWT this server signed, or one of a trusted issuer, else undefined. */
    async function verifyJwt(token, extraKeys) {
        let unverified;
        try {
            unverified = jose.decodeJwt(token);
        } catch {
            return undefined;
        }
        const issuer = typeof unverified.iss === 'string' ? unverified.iss : undefined;
        const candidates = [];
        if (issuer === provider.issuer) candidates.push(state.ownKeySet);
        const trusted = issuer && state.trustedIssuers.get(issuer);
        if (trusted) candidates.push(trusted);
        if (extraKeys && extraKeys.issuer === issuer) candidates.push(extraKeys.keySet);
        for (const keySet of candidates) {
            try {
                const { payload } = await jose.jwtVerify(token, keySet, {
                    issuer,
                    algorithms: JWT_ALGORITHMS,
                    clockTolerance: CLOCK_TOLERANCE,
                    requiredClaims: ['exp', 'sub']
                });
                return payload;
            } catch {
                // the next candidate, else refused
            }
        }
        return undefined;
    }

    /** The claims of an opaque access token (or client-credentials token) this server issued. */
    async function findOpaque(token) {
        const found =
            (await provider.AccessToken.find(token)) ?? (await provider.ClientCredentials.find(token));
        if (!found || found.isExpired) return undefined;
        return {
            iss: provider.issuer,
            sub: found.accountId ?? found.clientId,
            aud: found.aud,
            scope: found.scope,
            client_id: found.clientId,
            exp: found.exp,
            ...(found.extra ?? {})
        };
    }

    /** Validate a subject or actor token; its claims, or an error naming it. */
    async function validate(name, token, type, extraKeys) {
        if (typeof token !== 'string' || token === '') {
            throw fail(errors.InvalidRequest, `missing required parameter '${name}'`);
        }
        if (type !== TOKEN_TYPES.access_token && type !== TOKEN_TYPES.jwt) {
            throw fail(
                errors.InvalidRequest,
                `unsupported ${name}_type (this server accepts ${TOKEN_TYPES.access_token} and ${TOKEN_TYPES.jwt})`
            );
        }
        let claims;
        if (looksLikeJwt(token)) {
            claims = await verifyJwt(token, extraKeys);
        } else if (type === TOKEN_TYPES.access_token) {
            claims = await findOpaque(token);
        }
        if (!claims) throw fail(errors.InvalidGrant, `${name} is invalid, expired or not trusted`);
        return claims;
    }

    async function tokenExchange(ctx) {
        const { params, client } = ctx.oidc;
        const record = {};
        ctx.state.exchange = record; // what the request log says of this exchange

        const subject = await validate('subject_token', params.subject_token, params.subject_token_type);
        record.subject = subject.sub;
        record.subject_iss = subject.iss;
        if (typeof subject.test_marker === 'string') record.subject_marker = subject.test_marker;
        const wanted = state.config.exchange.subject_audience;
        if (wanted && !asList(subject.aud).includes(wanted)) {
            throw fail(errors.InvalidGrant, `subject_token is not for the audience ${wanted}`);
        }

        let actor;
        if (params.actor_token !== undefined || params.actor_token_type !== undefined) {
            // An actor token may also be a JWT the client signed itself with its registered key.
            actor = await validate(
                'actor_token',
                params.actor_token,
                params.actor_token_type,
                state.clientKeySets.get(client.clientId)
            );
            record.actor = actor.sub;
        }

        const targets = new Set([...asList(params.resource), ...asList(params.audience)]);
        if (targets.size === 0) throw fail(errors.InvalidTarget, 'an audience or resource is required');
        if (targets.size > 1) {
            throw fail(errors.InvalidTarget, 'one target per exchange: give one audience or resource');
        }
        const [target] = targets;
        record.target = target;
        for (const resource of asList(params.resource)) {
            if (!URL.canParse(resource) || resource.includes('#')) {
                throw fail(errors.InvalidTarget, 'resource must be an absolute URI without a fragment');
            }
        }
        const server = state.resourceServer(target, client);
        if (!server) throw fail(errors.InvalidTarget, `the client may not get a token for ${target}`);

        const defined = new Set(server.scope.split(' ').filter(Boolean));
        let scopes;
        if (params.scope !== undefined) {
            scopes = params.scope.split(' ').filter(Boolean);
            const unknown = scopes.filter((s) => !defined.has(s));
            if (unknown.length) {
                throw fail(errors.InvalidScope, `scope not defined for ${target}: ${unknown.join(' ')}`);
            }
        } else {
            scopes = String(subject.scope ?? '').split(' ').filter((s) => defined.has(s));
        }
        record.scope = scopes.join(' ');

        const requested = params.requested_token_type ?? TOKEN_TYPES.access_token;
        if (requested !== TOKEN_TYPES.access_token && requested !== TOKEN_TYPES.jwt) {
            throw fail(
                errors.InvalidRequest,
                `unsupported requested_token_type (this server issues ${TOKEN_TYPES.access_token} and ${TOKEN_TYPES.jwt})`
            );
        }

        const ttl = server.exchangeTTL;
        const extra = {};
        if (actor) {
            extra.act = { sub: actor.sub, ...(actor.act ? { act: actor.act } : {}) };
        } else if (subject.act) {
            extra.act = subject.act;
        }
        if (typeof subject.test_marker === 'string') extra.test_marker = subject.test_marker;
        const token = new provider.AccessToken({
            accountId: subject.sub,
            client,
            scope: scopes.join(' ') || undefined,
            gty: 'token_exchange',
            expiresIn: ttl
        });
        state.extraClaims.set(token, extra);
        token.resourceServer = {
            audience: target,
            scope: server.scope,
            accessTokenFormat: 'jwt',
            accessTokenTTL: ttl,
            jwt: { sign: { alg: 'RS256' } }
        };
        const value = await token.save();
        record.issued = true;
        ctx.body = {
            access_token: value,
            issued_token_type: requested,
            token_type: 'Bearer',
            expires_in: ttl,
            ...(scopes.length ? { scope: scopes.join(' ') } : {})
        };
    }

    provider.registerGrantType(GRANT_TYPE, tokenExchange, PARAMETERS, DUPLICATES);
}
