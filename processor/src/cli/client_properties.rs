//! `--command-config FILE`: the Java client properties file that Kafka's own tools take
//! (`kafka-topics --command-config client.properties`), and that Confluent Cloud's console
//! hands out, read as it is: into librdkafka properties, the brokers, and the schema
//! registry's settings.
//!
//! The file is read by Java's rules (`java-properties`: `=`, `:` or a blank between name
//! and value, `\` line continuations, `\uXXXX` escapes, ISO-8859-1 as `Properties.load`
//! reads it). Most names are the same in both clients; the rest are translated or refused
//! with what to use instead, never dropped without a word:
//! - `bootstrap.servers` names the brokers when `--brokers` does not;
//! - `sasl.jaas.config` is tokenized as Kafka does (either quote, comments): its PLAIN and
//!   SCRAM login modules become `sasl.username`/`sasl.password`;
//! - `schema.registry.url`, `basic.auth.*`, `bearer.auth.*` and `auto.register.schemas` go
//!   to the schema registry client, not to librdkafka;
//! - a PKCS#12 key store and a PEM trust store are passed to librdkafka's equivalents; a JKS
//!   store is refused (librdkafka cannot read one);
//! - Java's serializer classes are skipped (the caller logs them);
//! - `group.protocol=consumer` and `group.remote.assignor` are refused: the new protocol's
//!   broker-side assignor does not keep the input topics' partitions together, which
//!   Sluice's co-partitioning needs.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PropertiesError {
    #[error("reading --command-config {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("--command-config {path} line {line}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// What a client properties file says, sorted by who takes it.
#[derive(Debug, Default, PartialEq)]
pub struct ClientProperties {
    /// librdkafka's (name, value) pairs, in file order.
    pub kafka: Vec<(String, String)>,
    /// `bootstrap.servers`: the brokers, when the command line names none.
    pub bootstrap_servers: Option<String>,
    pub registry: RegistryProperties,
    /// Java client settings with no meaning here (serializer classes): skipped, and named
    /// so that the caller can say so.
    pub skipped: Vec<String>,
}

/// The schema registry's settings, as Confluent's serializers take them.
#[derive(Debug, Default, PartialEq)]
pub struct RegistryProperties {
    pub url: Option<String>,
    /// `USER:PASSWORD` for basic auth.
    pub basic_auth_user_info: Option<String>,
    pub bearer_token: Option<String>,
    pub auto_register: Option<bool>,
}

/// Java client settings that mean nothing to Sluice, which sets its formats itself.
const SKIPPED: &[&str] = &[
    "key.serializer",
    "value.serializer",
    "key.deserializer",
    "value.deserializer",
    "use.latest.version",
    "latest.compatibility.strict",
    "key.subject.name.strategy",
    "value.subject.name.strategy",
];

/// Java-only properties and what librdkafka takes instead.
const JAVA_ONLY: &[(&str, &str)] = &[
    (
        "sasl.login.callback.handler.class",
        "sasl.oauthbearer.* (librdkafka's OIDC settings)",
    ),
    (
        "sasl.client.callback.handler.class",
        "sasl.oauthbearer.* (librdkafka's OIDC settings)",
    ),
];

/// Reads `path` as a Java client properties file.
pub fn load(path: &Path) -> Result<ClientProperties, PropertiesError> {
    let file = std::fs::File::open(path).map_err(|source| PropertiesError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(std::io::BufReader::new(file)).map_err(|(line, message)| PropertiesError::Invalid {
        path: path.to_path_buf(),
        line,
        message,
    })
}

/// The properties `input` holds, or the (1-based) line of the first problem and what it
/// is. Secret values never appear in a message.
fn parse(input: impl std::io::Read) -> Result<ClientProperties, (usize, String)> {
    let mut entries = Vec::new();
    for line in java_properties::PropertiesIter::new(input) {
        let line = line.map_err(|e| (e.line_number().unwrap_or(0), e.to_string()))?;
        let number = line.line_number();
        if let java_properties::LineContent::KVPair(name, value) = line.consume_content() {
            entries.push((number, name, value));
        }
    }
    let mut out = ClientProperties::default();
    let mut stores = Stores::default();
    let mut registry_auth = RegistryAuth::default();
    let msk_iam = entries.iter().any(|(_, name, value)| is_msk_iam(name, value));
    for (line, name, value) in entries {
        let at = |message: String| (line, message);
        if msk_iam {
            match name.as_str() {
                // Set once below, whichever form the file takes.
                "sasl.mechanism" => continue,
                "sasl.jaas.config" => {
                    let (settings, skipped) =
                        msk_iam_login(&value).map_err(|m| at(format!("sasl.jaas.config: {m}")))?;
                    out.kafka.extend(settings);
                    out.skipped.extend(skipped);
                    continue;
                }
                "sasl.login.callback.handler.class" | "sasl.client.callback.handler.class"
                    if value.trim().starts_with(MSK_IAM_PACKAGE) =>
                {
                    continue
                }
                _ => {}
            }
        }
        // Confluent's older clients prefix the registry's own settings with its name.
        let registry_name = name
            .strip_prefix("schema.registry.")
            .filter(|n| n.starts_with("basic.auth."));
        match registry_name.unwrap_or(&name) {
            "bootstrap.servers" => out.bootstrap_servers = Some(value),
            "sasl.jaas.config" => match jaas_login(&value).map_err(|m| at(format!("sasl.jaas.config: {m}")))? {
                Login::Password { user, password } => {
                    registry_auth.sasl = Some(format!("{user}:{password}"));
                    out.kafka.push(("sasl.username".into(), user));
                    out.kafka.push(("sasl.password".into(), password));
                }
                Login::Oidc(settings) => out.kafka.extend(settings),
            },
            // What librdkafka's `sasl.oauthbearer.method=oidc` does itself.
            "sasl.login.callback.handler.class" if value.trim().ends_with(".OAuthBearerLoginCallbackHandler") => {}
            "schema.registry.url" => out.registry.url = Some(value),
            "basic.auth.credentials.source" => registry_auth.basic_source = Some((line, value)),
            "basic.auth.user.info" => registry_auth.user_info = Some(value),
            "bearer.auth.credentials.source" => registry_auth.bearer_source = Some((line, value)),
            "bearer.auth.token" => registry_auth.token = Some(value),
            "auto.register.schemas" => {
                let parsed = java_bool(&value).ok_or_else(|| at(format!("{name}: expected true or false")))?;
                out.registry.auto_register = Some(parsed);
            }
            "group.protocol" if value.eq_ignore_ascii_case("classic") => {}
            "group.protocol" | "group.remote.assignor" => {
                return Err(at(format!(
                    "{name}: the consumer group protocol's broker-side assignor does not keep the input topics' partitions together, which Sluice needs; remove it (Sluice uses the classic protocol)"
                )))
            }
            n if SKIPPED.contains(&n) => out.skipped.push(name),
            n if n.starts_with("ssl.truststore.") || n.starts_with("ssl.keystore.") => {
                stores.set(n, line, value).map_err(at)?;
            }
            n if n.starts_with("schema.registry.")
                || n.starts_with("basic.auth.")
                || n.starts_with("bearer.auth.") =>
            {
                return Err(at(format!(
                    "{name}: not a schema registry setting Sluice takes (schema.registry.url, basic.auth.credentials.source, basic.auth.user.info, bearer.auth.credentials.source, bearer.auth.token, auto.register.schemas)"
                )))
            }
            n => {
                if let Some((_, instead)) = JAVA_ONLY.iter().find(|(p, _)| n == *p) {
                    return Err(at(format!("{name} is a Java client setting; librdkafka takes {instead}")));
                }
                out.kafka.push((name, value));
            }
        }
    }
    if msk_iam {
        out.kafka.push(("sasl.mechanism".into(), "AWS_MSK_IAM".into()));
    }
    out.kafka.extend(stores.into_librdkafka()?);
    registry_auth.resolve(&mut out.registry)?;
    Ok(out)
}

/// Java's `Boolean.parseBoolean` as Kafka's config parser narrows it: `true` or `false`,
/// in any case.
fn java_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The registry's credentials as Confluent's clients choose them: `basic.auth.credentials.
/// source` is `USER_INFO` (the default: `basic.auth.user.info`), `URL` (user info in the
/// URL) or `SASL_INHERIT` (the Kafka SASL credentials); `bearer.auth.credentials.source`
/// is `STATIC_TOKEN` (`bearer.auth.token`).
#[derive(Default)]
struct RegistryAuth {
    basic_source: Option<(usize, String)>,
    user_info: Option<String>,
    bearer_source: Option<(usize, String)>,
    token: Option<String>,
    /// `USER:PASSWORD` from `sasl.jaas.config`.
    sasl: Option<String>,
}

impl RegistryAuth {
    fn resolve(self, registry: &mut RegistryProperties) -> Result<(), (usize, String)> {
        match self
            .basic_source
            .as_ref()
            .map(|(line, s)| (*line, s.to_ascii_uppercase()))
        {
            None => registry.basic_auth_user_info = self.user_info,
            Some((_, s)) if s == "USER_INFO" => registry.basic_auth_user_info = self.user_info,
            Some((_, s)) if s == "URL" => {}
            Some((line, s)) if s == "SASL_INHERIT" => {
                let sasl = self.sasl.ok_or((
                    line,
                    "basic.auth.credentials.source=SASL_INHERIT, but sasl.jaas.config gives no credentials".to_string(),
                ))?;
                registry.basic_auth_user_info = Some(sasl);
            }
            Some((line, s)) => {
                return Err((
                    line,
                    format!("basic.auth.credentials.source={s}: expected USER_INFO, URL or SASL_INHERIT"),
                ))
            }
        }
        match self
            .bearer_source
            .as_ref()
            .map(|(line, s)| (*line, s.to_ascii_uppercase()))
        {
            None => registry.bearer_token = self.token,
            Some((_, s)) if s == "STATIC_TOKEN" => registry.bearer_token = self.token,
            Some((line, s)) => {
                return Err((
                    line,
                    format!(
                        "bearer.auth.credentials.source={s}: only STATIC_TOKEN (with bearer.auth.token) is supported"
                    ),
                ))
            }
        }
        Ok(())
    }
}

/// Java's key and trust store settings, gathered to be translated together (a store's type
/// decides what its location means).
#[derive(Default)]
struct Stores {
    keystore: Store,
    truststore: Store,
}

#[derive(Default)]
struct Store {
    /// The first line that named this store, for messages.
    line: Option<usize>,
    kind: Option<String>,
    location: Option<String>,
    password: Option<String>,
    /// Inline PEM: a trust store's `certificates`, a key store's `certificate.chain`.
    certificates: Option<String>,
    key: Option<String>,
}

impl Stores {
    /// Takes `name` (`ssl.keystore.*` or `ssl.truststore.*`); `Err` for a setting of a
    /// store that librdkafka has no place for.
    fn set(&mut self, name: &str, line: usize, value: String) -> Result<(), String> {
        let (store, field) = match name.split_once("store.") {
            Some(("ssl.key", field)) => (&mut self.keystore, field),
            Some((_, field)) => (&mut self.truststore, field),
            None => return Err(format!("{name}: not a store setting")),
        };
        store.line.get_or_insert(line);
        match field {
            "type" => store.kind = Some(value.to_ascii_uppercase()),
            "location" => store.location = Some(value),
            "password" => store.password = Some(value),
            "certificates" | "certificate.chain" => store.certificates = Some(value),
            "key" => store.key = Some(value),
            _ => return Err(format!("{name}: librdkafka has no equivalent (it takes a store's type, location, password, and PEM certificates and key)")),
        }
        Ok(())
    }

    /// librdkafka's settings for the stores: a PKCS#12 key store as itself
    /// (`ssl.keystore.location`/`password`), PEM ones as certificate and key, a PEM trust
    /// store as the CA. A store's type defaults to Kafka's (JKS), unless its file's
    /// extension says PKCS#12 (`.p12`, `.pfx`) or PEM (`.pem`, `.crt`).
    fn into_librdkafka(self) -> Result<Vec<(String, String)>, (usize, String)> {
        let mut out = Vec::new();
        let pair = |name: &str, value: String| (name.to_string(), value);
        if let Some(line) = self.truststore.line {
            match (self.truststore.kind()?.as_str(), self.truststore) {
                ("PEM", Store { location: Some(location), .. }) => out.push(pair("ssl.ca.location", location)),
                ("PEM", Store { certificates: Some(pem), .. }) => out.push(pair("ssl.ca.pem", pem)),
                ("PEM", _) => return Err((line, "ssl.truststore.type=PEM needs ssl.truststore.location or ssl.truststore.certificates".into())),
                (kind, _) => return Err((line, format!(
                    "a {kind} trust store: librdkafka reads PEM only; export the CA certificates (`keytool -exportcert -rfc` or `openssl pkcs12 -nokeys`) to a file and give it as ssl.ca.location, or as ssl.truststore.location with ssl.truststore.type=PEM"
                ))),
            }
        }
        if let Some(line) = self.keystore.line {
            match (self.keystore.kind()?.as_str(), self.keystore) {
                ("PKCS12", Store { location: Some(location), password, .. }) => {
                    out.push(pair("ssl.keystore.location", location));
                    out.extend(password.map(|p| pair("ssl.keystore.password", p)));
                }
                ("PEM", Store { certificates: Some(certificates), key: Some(key), .. }) => {
                    out.push(pair("ssl.certificate.pem", certificates));
                    out.push(pair("ssl.key.pem", key));
                }
                ("PEM", Store { location: Some(location), .. }) => {
                    // One file holding both, as Java's PEM key store does.
                    out.push(pair("ssl.certificate.location", location.clone()));
                    out.push(pair("ssl.key.location", location));
                }
                ("PKCS12" | "PEM", _) => return Err((line, "the key store needs ssl.keystore.location (or, PEM, ssl.keystore.certificate.chain with ssl.keystore.key)".into())),
                (kind, _) => return Err((line, format!(
                    "a {kind} key store: librdkafka reads PKCS#12 or PEM; convert it (`keytool -importkeystore -deststoretype PKCS12`) and set ssl.keystore.type=PKCS12"
                ))),
            }
        }
        Ok(out)
    }
}

impl Store {
    /// The store's type: as given, else by its file's extension, else Kafka's default.
    fn kind(&self) -> Result<String, (usize, String)> {
        if let Some(kind) = &self.kind {
            return Ok(kind.clone());
        }
        let extension = (self.location.as_deref())
            .and_then(|l| Path::new(l).extension())
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        Ok(match extension.as_deref() {
            Some("p12" | "pfx") => "PKCS12",
            Some("pem" | "crt") => "PEM",
            _ if self.certificates.is_some() => "PEM",
            _ => "JKS",
        }
        .to_string())
    }
}

/// The package of AWS's MSK IAM library for Java (`aws-msk-iam-auth`).
const MSK_IAM_PACKAGE: &str = "software.amazon.msk.auth.iam.";

/// Whether a property asks for AWS MSK IAM, in either of the forms AWS documents: the
/// `AWS_MSK_IAM` mechanism with `IAMLoginModule`, or OAUTHBEARER with
/// `IAMOAuthBearerLoginCallbackHandler`.
fn is_msk_iam(name: &str, value: &str) -> bool {
    let value = value.trim();
    match name {
        "sasl.mechanism" => value.eq_ignore_ascii_case("AWS_MSK_IAM"),
        "sasl.jaas.config" | "sasl.login.callback.handler.class" | "sasl.client.callback.handler.class" => {
            value.starts_with(MSK_IAM_PACKAGE)
        }
        _ => false,
    }
}

/// librdkafka's (name, value) pairs, and the Java options skipped (named).
type Translated = (Vec<(String, String)>, Vec<String>);

/// The settings of an MSK IAM login module's options, and the options skipped (named).
/// Credentials come from the AWS default chain, as for the AWS jobs, never from the file.
fn msk_iam_login(jaas: &str) -> Result<Translated, String> {
    let entry = jaas::parse(jaas)?;
    let module = entry.module.as_str();
    if !(module == "software.amazon.msk.auth.iam.IAMLoginModule" || module.ends_with(".OAuthBearerLoginModule")) {
        return Err(format!(
            "login module {module} with AWS MSK IAM: give software.amazon.msk.auth.iam.IAMLoginModule"
        ));
    }
    let (mut settings, mut skipped) = (Vec::new(), Vec::new());
    for (option, value) in &entry.options {
        match option.as_str() {
            "awsRoleArn" => settings.push(("aws.msk.iam.role.arn".to_string(), value.clone())),
            // Sluice's own retries, session name and STS endpoint serve instead.
            "awsRoleSessionName" | "awsStsRegion" | "awsDebugCreds" | "awsMaxRetries" | "awsMaxBackOffTimeMs" => {
                skipped.push(format!("{option} (sasl.jaas.config)"))
            }
            "awsProfileName" => {
                return Err("awsProfileName: set AWS_PROFILE in Sluice's environment instead".into())
            }
            "awsRoleAccessKeyId" | "awsRoleSecretAccessKey" | "awsRoleSessionToken" => {
                return Err(format!(
                    "{option}: Sluice takes AWS credentials from the default chain (environment, profile, web identity, container or instance credentials), not from this file"
                ))
            }
            other => return Err(format!("{module}: option {other} is not one Sluice knows")),
        }
    }
    Ok((settings, skipped))
}

/// What a `sasl.jaas.config` logs in with.
enum Login {
    /// A PLAIN or SCRAM login module's `username` and `password`.
    Password { user: String, password: String },
    /// Kafka's `OAuthBearerLoginModule` with the client credentials grant (as Confluent
    /// Cloud's OAuth template has it): librdkafka's OIDC settings. The token endpoint is
    /// `sasl.oauthbearer.token.endpoint.url`, which both clients name alike.
    Oidc(Vec<(String, String)>),
}

fn jaas_login(jaas: &str) -> Result<Login, String> {
    let entry = jaas::parse(jaas)?;
    let module = entry.module.as_str();
    let option = |name: &str| entry.options.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let required = |name: &str| option(name).ok_or_else(|| format!("{module} has no {name}"));
    if module.ends_with("PlainLoginModule") || module.ends_with("ScramLoginModule") {
        return Ok(Login::Password {
            user: required("username")?,
            password: required("password")?,
        });
    }
    if !module.ends_with(".OAuthBearerLoginModule") {
        return Err(format!(
            "login module {module} is not supported: give PLAIN, SCRAM or OAUTHBEARER (client credentials) credentials, or set librdkafka's sasl.* properties"
        ));
    }
    if option("unsecuredLoginStringClaim_sub").is_some() {
        return Err("an unsecured OAUTHBEARER login (unsecuredLoginStringClaim_sub) is for tests only; give clientId and clientSecret".into());
    }
    let mut settings = vec![
        ("sasl.oauthbearer.method".to_string(), "oidc".to_string()),
        ("sasl.oauthbearer.client.id".to_string(), required("clientId")?),
        ("sasl.oauthbearer.client.secret".to_string(), required("clientSecret")?),
    ];
    if let Some(scope) = option("scope") {
        settings.push(("sasl.oauthbearer.scope".into(), scope));
    }
    // SASL extensions (Confluent Cloud's logicalCluster and identityPoolId).
    let extensions: Vec<String> = entry
        .options
        .iter()
        .filter_map(|(k, v)| Some(format!("{}={v}", k.strip_prefix("extension_")?)))
        .collect();
    if !extensions.is_empty() {
        settings.push(("sasl.oauthbearer.extensions".into(), extensions.join(",")));
    }
    let known = |k: &str| ["clientId", "clientSecret", "scope"].contains(&k) || k.starts_with("extension_");
    if let Some((unknown, _)) = entry.options.iter().find(|(k, _)| !known(k)) {
        return Err(format!(
            "{module}: option {unknown} has no librdkafka equivalent (it takes clientId, clientSecret, scope and extension_*)"
        ));
    }
    Ok(Login::Oidc(settings))
}

/// `sasl.jaas.config` as Kafka reads it (`JaasConfig`, over Java's `StreamTokenizer`): a
/// login module, its control flag, `key=value` options whose values are words or strings in
/// either quote (with backslash escapes), and a `;`; `//` and `/* */` comments between.
mod jaas {
    pub struct Entry {
        pub module: String,
        pub options: Vec<(String, String)>,
    }

    #[derive(Debug, PartialEq)]
    enum Token {
        Word(String),
        Quoted(String),
        Char(char),
    }

    /// The first login module's entry; messages never repeat a value (they may be secret).
    pub fn parse(text: &str) -> Result<Entry, String> {
        let mut tokens = tokens(text)?.into_iter();
        let module = match tokens.next() {
            Some(Token::Word(module)) => module,
            _ => return Err("no login module".into()),
        };
        match tokens.next() {
            Some(Token::Word(flag))
                if ["required", "requisite", "sufficient", "optional"]
                    .contains(&flag.to_ascii_lowercase().as_str()) => {}
            _ => {
                return Err(format!(
                    "{module}: expected a control flag (required, requisite, sufficient or optional)"
                ))
            }
        }
        let mut options = Vec::new();
        loop {
            let key = match tokens.next() {
                Some(Token::Char(';')) => break,
                Some(Token::Word(key)) => key,
                _ => return Err(format!("{module}: the entry must end with ';'")),
            };
            if tokens.next() != Some(Token::Char('=')) {
                return Err(format!("{module}: no value for {key}"));
            }
            match tokens.next() {
                Some(Token::Word(value) | Token::Quoted(value)) => options.push((key, value)),
                _ => return Err(format!("{module}: no value for {key}")),
            }
        }
        Ok(Entry { module, options })
    }

    fn is_word(c: char) -> bool {
        c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '$') || u32::from(c) >= 160
    }

    fn tokens(text: &str) -> Result<Vec<Token>, String> {
        let mut out = Vec::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                c if c.is_whitespace() || u32::from(c) <= 32 => {}
                '/' if chars.peek() == Some(&'/') => {
                    chars.by_ref().take_while(|c| *c != '\n' && *c != '\r').for_each(drop);
                }
                '/' if chars.peek() == Some(&'*') => {
                    chars.next();
                    let mut last = ' ';
                    loop {
                        match chars.next() {
                            Some('/') if last == '*' => break,
                            Some(c) => last = c,
                            None => return Err("an unclosed /* comment".into()),
                        }
                    }
                }
                '"' | '\'' => out.push(Token::Quoted(quoted(c, &mut chars)?)),
                c if is_word(c) => {
                    let mut word = c.to_string();
                    while let Some(c) = chars.next_if(|c| is_word(*c)) {
                        word.push(c);
                    }
                    out.push(Token::Word(word));
                }
                c => out.push(Token::Char(c)),
            }
        }
        Ok(out)
    }

    /// A string after its opening `quote`, to the same quote, with `StreamTokenizer`'s
    /// escapes. It may not run past its line.
    fn quoted(quote: char, chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<String, String> {
        let mut value = String::new();
        loop {
            match chars.next() {
                Some(c) if c == quote => return Ok(value),
                None | Some('\n' | '\r') => return Err("a quoted value is not closed".into()),
                Some('\\') => match chars.next() {
                    Some('a') => value.push('\u{7}'),
                    Some('b') => value.push('\u{8}'),
                    Some('f') => value.push('\u{c}'),
                    Some('n') => value.push('\n'),
                    Some('r') => value.push('\r'),
                    Some('t') => value.push('\t'),
                    Some('v') => value.push('\u{b}'),
                    Some(d @ '0'..='7') => {
                        // Up to three octal digits, the first no higher than 3 for three.
                        let mut code = d.to_digit(8).unwrap_or(0);
                        let most = if d <= '3' { 2 } else { 1 };
                        for _ in 0..most {
                            match chars.next_if(|c| c.is_digit(8)) {
                                Some(c) => code = code * 8 + c.to_digit(8).unwrap_or(0),
                                None => break,
                            }
                        }
                        value.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                    }
                    Some(other) => value.push(other),
                    None => return Err("a quoted value is not closed".into()),
                },
                Some(c) => value.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn parsed(text: &str) -> Result<ClientProperties, (usize, String)> {
        parse(text.as_bytes())
    }

    /// Confluent Cloud's console template for Java clients, filled in as a team would.
    const CONFLUENT_CLOUD: &str = r#"# Required connection configs for Kafka producer, consumer, and admin
bootstrap.servers=pkc-abc12.eu-west-1.aws.confluent.cloud:9092
security.protocol=SASL_SSL
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username='ABCKEY' password='s3cr=t:p\u00e4ss';
sasl.mechanism=PLAIN
# Required for correctness in Apache Kafka clients prior to 2.6
client.dns.lookup=use_all_dns_ips

# Best practice for higher availability in Apache Kafka clients prior to 3.0
session.timeout.ms=45000

# Best practice for Kafka producer to prevent data loss
acks=all

# Required connection configs for Confluent Cloud Schema Registry
schema.registry.url=https://psrc-xyz.eu-west-1.aws.confluent.cloud
basic.auth.credentials.source=USER_INFO
basic.auth.user.info=SRKEY:SRSECRET
"#;

    #[test]
    fn confluent_clouds_template_is_read_unchanged() {
        let read = parsed(CONFLUENT_CLOUD).unwrap();
        assert_eq!(
            read,
            ClientProperties {
                kafka: pairs(&[
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.username", "ABCKEY"),
                    ("sasl.password", "s3cr=t:p\u{e4}ss"),
                    ("sasl.mechanism", "PLAIN"),
                    ("client.dns.lookup", "use_all_dns_ips"),
                    ("session.timeout.ms", "45000"),
                    // Sluice's own value: the connection accepts it (see kafka.rs).
                    ("acks", "all"),
                ]),
                bootstrap_servers: Some("pkc-abc12.eu-west-1.aws.confluent.cloud:9092".into()),
                registry: RegistryProperties {
                    url: Some("https://psrc-xyz.eu-west-1.aws.confluent.cloud".into()),
                    basic_auth_user_info: Some("SRKEY:SRSECRET".into()),
                    bearer_token: None,
                    auto_register: None,
                },
                skipped: vec![],
            }
        );
    }

    /// Two layers of escapes, as in Java: the file's (`\\` is one backslash), then the JAAS
    /// string's (`\"` is a quote).
    #[test]
    fn java_properties_syntax_is_read_as_java_reads_it() {
        let text = "
! another comment style
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username=\"u\" /* a comment */ password=\"p\\\\\"q\";
session.timeout.ms: 45000
client.dns.lookup use_all_dns_ips
";
        assert_eq!(
            parsed(text).unwrap().kafka,
            pairs(&[
                ("sasl.username", "u"),
                ("sasl.password", "p\"q"),
                ("session.timeout.ms", "45000"),
                ("client.dns.lookup", "use_all_dns_ips"),
            ])
        );
    }

    #[test]
    fn jaas_values_follow_kafkas_tokenizer() {
        let entry = jaas::parse(
            "x.PlainLoginModule REQUIRED // a comment\n username=plain_word$1 password='a b\\tc\\101' extra=\"x'y\";",
        )
        .unwrap();
        assert_eq!(entry.module, "x.PlainLoginModule");
        assert_eq!(
            entry.options,
            pairs(&[("username", "plain_word$1"), ("password", "a b\tcA"), ("extra", "x'y")])
        );
        for (bad, says) in [
            ("", "no login module"),
            ("x.PlainLoginModule", "control flag"),
            ("x.PlainLoginModule always username='u';", "control flag"),
            ("x.PlainLoginModule required username='u'", "end with ';'"),
            ("x.PlainLoginModule required username;", "no value for username"),
            ("x.PlainLoginModule required username='u;", "not closed"),
            ("x.PlainLoginModule required /* open", "unclosed"),
        ] {
            let e = jaas::parse(bad).err().unwrap_or_else(|| panic!("{bad:?} read"));
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn registry_credentials_follow_their_source() {
        let sasl = "sasl.jaas.config=x.PlainLoginModule required username='k' password='s';\n";
        let read = parsed(&format!(
            "{sasl}schema.registry.url=https://sr\nbasic.auth.credentials.source=SASL_INHERIT\nbasic.auth.user.info=ignored:x\nauto.register.schemas=FALSE\nuse.latest.version=true\n"
        ))
        .unwrap();
        assert_eq!(read.registry.basic_auth_user_info.as_deref(), Some("k:s"));
        assert_eq!(read.registry.auto_register, Some(false));
        assert_eq!(read.skipped, vec!["use.latest.version".to_string()]);
        // URL: the credentials are the URL's user info; the user info setting is not used.
        let read =
            parsed("schema.registry.url=https://u:p@sr\nbasic.auth.credentials.source=URL\nbasic.auth.user.info=a:b\n")
                .unwrap();
        assert_eq!(read.registry.basic_auth_user_info, None);
        // The older, prefixed names; a static bearer token.
        let read = parsed("schema.registry.basic.auth.user.info=a:b\nbearer.auth.credentials.source=STATIC_TOKEN\nbearer.auth.token=t\n").unwrap();
        assert_eq!(read.registry.basic_auth_user_info.as_deref(), Some("a:b"));
        assert_eq!(read.registry.bearer_token.as_deref(), Some("t"));
        for (bad, says) in [
            ("basic.auth.credentials.source=SASL_INHERIT\n", "gives no credentials"),
            ("basic.auth.credentials.source=NOPE\n", "expected USER_INFO"),
            ("bearer.auth.credentials.source=OAUTHBEARER\n", "only STATIC_TOKEN"),
            (
                "schema.registry.ssl.truststore.location=x\n",
                "not a schema registry setting",
            ),
            ("auto.register.schemas=maybe\n", "true or false"),
        ] {
            let (line, e) = parsed(bad).unwrap_err();
            assert!(e.contains(says) && line == 1, "{bad:?}: line {line}: {e}");
        }
    }

    #[test]
    fn key_and_trust_stores_become_librdkafkas_or_are_refused_with_what_to_do() {
        let read = parsed(
            "ssl.keystore.type=PKCS12\nssl.keystore.location=/etc/kafka/client.p12\nssl.keystore.password=kpw\nssl.truststore.type=PEM\nssl.truststore.location=/etc/kafka/ca.pem\n",
        )
        .unwrap();
        assert_eq!(
            read.kafka,
            pairs(&[
                ("ssl.ca.location", "/etc/kafka/ca.pem"),
                ("ssl.keystore.location", "/etc/kafka/client.p12"),
                ("ssl.keystore.password", "kpw"),
            ])
        );
        // The type from the extension, when none is given.
        let read = parsed("ssl.keystore.location=/k/client.pfx\n").unwrap();
        assert_eq!(read.kafka, pairs(&[("ssl.keystore.location", "/k/client.pfx")]));
        let read =
            parsed("ssl.keystore.type=PEM\nssl.keystore.certificate.chain=CERT\nssl.keystore.key=KEY\n").unwrap();
        assert_eq!(
            read.kafka,
            pairs(&[("ssl.certificate.pem", "CERT"), ("ssl.key.pem", "KEY")])
        );
        let (line, e) =
            parsed("a=b\nssl.truststore.location=/etc/kafka/truststore.jks\nssl.truststore.password=hunter2\n")
                .unwrap_err();
        assert!(
            line == 2 && e.contains("JKS trust store") && e.contains("ssl.ca.location") && !e.contains("hunter2"),
            "{line}: {e}"
        );
        let (_, e) = parsed("ssl.keystore.location=/k/client.jks\n").unwrap_err();
        assert!(e.contains("JKS key store") && e.contains("PKCS12"), "{e}");
        let (_, e) = parsed("ssl.keystore.type=PKCS12\n").unwrap_err();
        assert!(e.contains("needs ssl.keystore.location"), "{e}");
    }

    #[test]
    fn settings_that_would_break_sluices_guarantees_or_mean_nothing_are_refused_or_named() {
        let (line, e) = parsed("a=b\ngroup.protocol=consumer\n").unwrap_err();
        assert!(line == 2 && e.contains("partitions together"), "{line}: {e}");
        assert!(parsed("group.remote.assignor=uniform\n").is_err());
        assert_eq!(parsed("group.protocol=CLASSIC\n").unwrap(), ClientProperties::default());
        let read =
            parsed("key.serializer=org.apache.kafka.common.serialization.StringSerializer\nlinger.ms=5\n").unwrap();
        assert_eq!(read.skipped, vec!["key.serializer".to_string()]);
        assert_eq!(read.kafka, pairs(&[("linger.ms", "5")]));
        let (_, e) = parsed("sasl.client.callback.handler.class=com.example.Handler\n").unwrap_err();
        assert!(e.contains("Java client setting"), "{e}");
    }

    #[test]
    fn awss_msk_iam_properties_in_either_form_become_sluices_msk_iam_settings() {
        let iam_form = "security.protocol=SASL_SSL\n\
            sasl.mechanism=AWS_MSK_IAM\n\
            sasl.jaas.config=software.amazon.msk.auth.iam.IAMLoginModule required \\\n  \
              awsRoleArn=\"arn:aws:iam::123456789012:role/sluice\" awsDebugCreds=true;\n\
            sasl.client.callback.handler.class=software.amazon.msk.auth.iam.IAMClientCallbackHandler\n";
        let read = parsed(iam_form).unwrap();
        assert_eq!(
            read.kafka,
            pairs(&[
                ("security.protocol", "SASL_SSL"),
                ("aws.msk.iam.role.arn", "arn:aws:iam::123456789012:role/sluice"),
                ("sasl.mechanism", "AWS_MSK_IAM"),
            ])
        );
        assert_eq!(read.skipped, vec!["awsDebugCreds (sasl.jaas.config)".to_string()]);
        // The OAUTHBEARER form, its lines in another order: the same setting.
        let oauth_form =
            "sasl.login.callback.handler.class=software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler\n\
            sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;\n\
            sasl.mechanism=OAUTHBEARER\n\
            security.protocol=SASL_SSL\n";
        assert_eq!(
            parsed(oauth_form).unwrap().kafka,
            pairs(&[("security.protocol", "SASL_SSL"), ("sasl.mechanism", "AWS_MSK_IAM")])
        );
        let keys = "sasl.mechanism=AWS_MSK_IAM\n\
            sasl.jaas.config=software.amazon.msk.auth.iam.IAMLoginModule required awsRoleAccessKeyId=AKIA awsRoleSecretAccessKey=hunter2;\n";
        let (line, e) = parsed(keys).unwrap_err();
        assert!(
            line == 2 && e.contains("default chain") && !e.contains("hunter2"),
            "{line}: {e}"
        );
        let (_, e) = parsed(
            "sasl.mechanism=AWS_MSK_IAM\nsasl.jaas.config=software.amazon.msk.auth.iam.IAMLoginModule required awsProfileName=dev;\n",
        )
        .unwrap_err();
        assert!(e.contains("AWS_PROFILE"), "{e}");
    }

    #[test]
    fn confluent_clouds_oauth_template_becomes_librdkafkas_oidc_settings() {
        let template = "security.protocol=SASL_SSL\n\
            sasl.mechanism=OAUTHBEARER\n\
            sasl.oauthbearer.token.endpoint.url=https://idp.example/oauth2/v1/token\n\
            sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler\n\
            sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \\\n  \
              clientId='sluice-app' \\\n  scope='kafka' \\\n  clientSecret='s3cr=et' \\\n  \
              extension_logicalCluster='lkc-abc12' \\\n  extension_identityPoolId='pool-XyZ';\n";
        let read = parsed(template).unwrap();
        assert_eq!(
            read.kafka,
            pairs(&[
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanism", "OAUTHBEARER"),
                (
                    "sasl.oauthbearer.token.endpoint.url",
                    "https://idp.example/oauth2/v1/token"
                ),
                ("sasl.oauthbearer.method", "oidc"),
                ("sasl.oauthbearer.client.id", "sluice-app"),
                ("sasl.oauthbearer.client.secret", "s3cr=et"),
                ("sasl.oauthbearer.scope", "kafka"),
                (
                    "sasl.oauthbearer.extensions",
                    "logicalCluster=lkc-abc12,identityPoolId=pool-XyZ"
                ),
            ])
        );
        let (_, e) = parsed(
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId=a clientSecret=b unsecuredLoginStringClaim_sub=x;\n",
        )
        .unwrap_err();
        assert!(e.contains("unsecured"), "{e}");
        let (_, e) = parsed("sasl.login.callback.handler.class=com.example.MyHandler\n").unwrap_err();
        assert!(e.contains("Java client setting"), "{e}");
    }

    #[test]
    fn unsupported_login_modules_are_refused_and_secrets_never_shown() {
        let oauth = "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientSecret=\"hunter2\";";
        let (_, message) = parsed(oauth).unwrap_err();
        assert!(
            message.contains("OAuthBearerLoginModule") && !message.contains("hunter2"),
            "{message}"
        );
        let unclosed = "sasl.jaas.config=x.PlainLoginModule required username=u password='hunter2;";
        let (_, message) = parsed(unclosed).unwrap_err();
        assert!(
            message.contains("not closed") && !message.contains("hunter2"),
            "{message}"
        );
        let (_, message) = parsed("sasl.jaas.config=x.PlainLoginModule required username=u;").unwrap_err();
        assert!(message.contains("no password"), "{message}");
    }

    #[test]
    fn a_missing_file_names_itself() {
        let e = load(Path::new("/nonexistent/client.properties"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/client.properties"), "{e}");
    }
}
