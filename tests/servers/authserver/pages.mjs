// The sign-in and consent pages of the test authorization server (oidc-provider's
// "interactions"): plain HTML forms a browser can fill, with stable element ids.
//
//   GET  /interaction/:uid           the page the prompt needs:
//        login    main#page-sign-in: form#login-form  input#login[name=login]
//                 input#password[name=password]  button#sign-in; a refused one shows p#error
//        consent  main#page-authorize: form#consent-form  button#approve;
//                 form#deny-form  button#deny; ul#scopes lists what is asked
//        an expired or used interaction: main#page-error with p#error
//   POST /interaction/:uid/login     login=<user>&password=<password>
//   POST /interaction/:uid/confirm   grants what the prompt asks, then back to the provider
//   POST /interaction/:uid/abort     ends the request with access_denied

import { createHash, timingSafeEqual } from 'node:crypto';

const FORM_LIMIT = 16 * 1024;

const escape = (text) =>
    String(text).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

const digest = (text) => createHash('sha256').update(String(text)).digest();

function layout(title, body) {
    return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>${escape(title)}</title></head>
<body><main id="page-${escape(title.toLowerCase().replace(/\W+/g, '-'))}">
<h1>${escape(title)}</h1>
${body}
</main></body></html>`;
}

function loginPage(uid, client, error) {
    return layout(
        'Sign in',
        `<p id="client">to continue to <b>${escape(client.clientName ?? client.clientId)}</b></p>
${error ? `<p id="error" role="alert">${escape(error)}</p>` : ''}
<form id="login-form" method="post" action="/interaction/${escape(uid)}/login" autocomplete="off">
  <label for="login">Username</label> <input id="login" name="login" type="text" required>
  <label for="password">Password</label> <input id="password" name="password" type="password" required>
  <button id="sign-in" type="submit">Sign in</button>
</form>`
    );
}

function consentPage(uid, client, accountId, details) {
    const asked = [
        ...(details.missingOIDCScope ?? []).map((s) => [s, '']),
        ...Object.entries(details.missingResourceScopes ?? {}).flatMap(([resource, scopes]) =>
            scopes.map((s) => [s, resource])
        )
    ];
    const items = asked
        .map(([s, r]) => `<li class="scope" data-scope="${escape(s)}">${escape(s)}${r ? ` at ${escape(r)}` : ''}</li>`)
        .join('\n');
    return layout(
        'Authorize',
        `<p id="client"><b>${escape(client.clientName ?? client.clientId)}</b> asks
<span id="account">${escape(accountId)}</span> for access:</p>
<ul id="scopes">${items}</ul>
<form id="consent-form" method="post" action="/interaction/${escape(uid)}/confirm">
  <button id="approve" type="submit">Allow</button>
</form>
<form id="deny-form" method="post" action="/interaction/${escape(uid)}/abort">
  <button id="deny" type="submit">Deny</button>
</form>`
    );
}

async function readForm(ctx) {
    const chunks = [];
    let size = 0;
    for await (const chunk of ctx.req) {
        size += chunk.length;
        if (size > FORM_LIMIT) ctx.throw(413, 'form too large');
        chunks.push(chunk);
    }
    return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

/** Middleware serving /interaction/...; `accounts` maps user -> {password, claims};
 * `onGrant(accountId, clientId, grantId)` is told of every grant a consent saves. */
export function interactions(provider, oidc, accounts, onGrant) {
    const route = /^\/interaction\/([\w-]+)(?:\/(login|confirm|abort))?$/;

    function checkPassword(login, password) {
        const account = Object.hasOwn(accounts, login) ? accounts[login] : undefined;
        // Compare even for an unknown user, so the answer takes the same time.
        const same = timingSafeEqual(digest(password), digest(account ? account.password : '\0'));
        return account !== undefined && same;
    }

    async function render(ctx, html, status = 200) {
        ctx.status = status;
        ctx.type = 'html';
        ctx.set('cache-control', 'no-store');
        ctx.body = html;
    }

    return async function interactionRoutes(ctx, next) {
        const match = route.exec(ctx.path);
        if (!match) return next();
        const [, , action] = match;
        let details;
        try {
            details = await provider.interactionDetails(ctx.req, ctx.res);
        } catch (err) {
            if (err instanceof oidc.errors.SessionNotFound) {
                return render(ctx, layout('Error', '<p id="error">This sign-in has expired or was already used.</p>'), 400);
            }
            throw err;
        }
        const { uid, prompt, params, session } = details;
        const client = await provider.Client.find(params.client_id);
        if (!action && ctx.method === 'GET') {
            if (prompt.name === 'login') return render(ctx, loginPage(uid, client));
            if (prompt.name === 'consent') return render(ctx, consentPage(uid, client, session.accountId, prompt.details));
            return render(ctx, layout('Error', `<p id="error">unexpected prompt ${escape(prompt.name)}</p>`), 400);
        }
        if (ctx.method !== 'POST' || !action) ctx.throw(405);
        ctx.state.interaction = action;
        if (action === 'abort') {
            return provider.interactionFinished(ctx.req, ctx.res, {
                error: 'access_denied',
                error_description: 'the user denied the request'
            }, { mergeWithLastSubmission: false });
        }
        const form = await readForm(ctx);
        if (action === 'login') {
            if (prompt.name !== 'login') ctx.throw(400, 'not a sign-in step');
            const login = form.get('login') ?? '';
            ctx.state.account = login; // the user name is logged, never the password
            if (!checkPassword(login, form.get('password') ?? '')) {
                return render(ctx, loginPage(uid, client, 'Invalid username or password.'), 401);
            }
            return provider.interactionFinished(ctx.req, ctx.res, { login: { accountId: login } }, {
                mergeWithLastSubmission: false
            });
        }
        // confirm
        if (prompt.name !== 'consent') ctx.throw(400, 'not a consent step');
        const { accountId } = session;
        let grant = details.grantId ? await provider.Grant.find(details.grantId) : undefined;
        grant ??= new provider.Grant({ accountId, clientId: params.client_id });
        const asked = prompt.details;
        if (asked.missingOIDCScope) grant.addOIDCScope(asked.missingOIDCScope.join(' '));
        if (asked.missingOIDCClaims) grant.addOIDCClaims(asked.missingOIDCClaims);
        for (const [indicator, scopes] of Object.entries(asked.missingResourceScopes ?? {})) {
            grant.addResourceScope(indicator, scopes.join(' '));
        }
        const grantId = await grant.save();
        onGrant(accountId, params.client_id, grantId);
        const consent = details.grantId ? {} : { grantId };
        return provider.interactionFinished(ctx.req, ctx.res, { consent }, { mergeWithLastSubmission: true });
    };
}
