//! The DHCP server of KubeVirt's masquerade binding: one client (the guest's MAC), one
//! address (`10.0.2.2/24`), the gateway `10.0.2.1` as router and server, the cluster
//! DNS server and search domains, the hostname, the Pod interface's MTU, and a lease
//! that never ends. It answers on the Pod's guest bridge, from inside the Pod's
//! namespace; every other client is ignored.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::str::FromStr;

use dhcproto::v4::{DhcpOption, Message, MessageType, Opcode, OptionCode};
use dhcproto::{Decodable, Decoder, Encodable, Encoder, Name};
use tokio::net::UdpSocket;

pub const SERVER_PORT: u16 = 67;
pub const CLIENT_PORT: u16 = 68;
/// RFC 2131's "infinite" lease.
const INFINITE: u32 = u32::MAX;

/// What the guest is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The guest's MAC, the only client answered.
    pub mac: [u8; 6],
    pub address: Ipv4Addr,
    pub prefix_len: u8,
    /// Router and server identifier.
    pub gateway: Ipv4Addr,
    pub dns_servers: Vec<Ipv4Addr>,
    pub search: Vec<String>,
    pub hostname: String,
    pub mtu: Option<u16>,
}

/// A MAC written `02:00:00:aa:bb:cc`.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn mask(prefix_len: u8) -> Ipv4Addr {
    Ipv4Addr::from(
        u32::MAX
            .checked_shl(32 - u32::from(prefix_len))
            .unwrap_or(0),
    )
}

/// The reply to `request`, and where to send it; `None` when there is nothing to say
/// (another client, a release, a decline, a message that is no request).
pub fn answer(request: &Message, lease: &Lease) -> Option<(Message, SocketAddrV4)> {
    // dhcproto slices chaddr by the sender's hlen without checking it: more than the
    // field's 16 bytes would panic there, so such a packet is dropped first.
    if request.opcode() != Opcode::BootRequest
        || request.hlen() > 16
        || request.chaddr().get(..6)? != lease.mac
    {
        return None;
    }
    let requested = match request.opts().get(OptionCode::RequestedIpAddress) {
        Some(DhcpOption::RequestedIpAddress(ip)) => Some(*ip),
        _ => (!request.ciaddr().is_unspecified()).then(|| request.ciaddr()),
    };
    let kind = match request.opts().msg_type()? {
        MessageType::Discover => MessageType::Offer,
        MessageType::Request if requested.is_none_or(|ip| ip == lease.address) => MessageType::Ack,
        MessageType::Request => MessageType::Nak,
        MessageType::Inform => MessageType::Ack,
        _ => return None,
    };
    let inform = request.opts().msg_type() == Some(MessageType::Inform);
    let mut reply = Message::new_with_id(
        request.xid(),
        if inform {
            request.ciaddr()
        } else {
            Ipv4Addr::UNSPECIFIED
        },
        if kind == MessageType::Nak || inform {
            Ipv4Addr::UNSPECIFIED
        } else {
            lease.address
        },
        lease.gateway,
        request.giaddr(),
        request.chaddr(),
    );
    reply.set_opcode(Opcode::BootReply);
    reply.set_flags(request.flags());
    let opts = reply.opts_mut();
    opts.insert(DhcpOption::MessageType(kind));
    opts.insert(DhcpOption::ServerIdentifier(lease.gateway));
    if kind != MessageType::Nak {
        if !inform {
            opts.insert(DhcpOption::AddressLeaseTime(INFINITE));
        }
        opts.insert(DhcpOption::SubnetMask(mask(lease.prefix_len)));
        opts.insert(DhcpOption::Router(vec![lease.gateway]));
        if !lease.dns_servers.is_empty() {
            opts.insert(DhcpOption::DomainNameServer(lease.dns_servers.clone()));
        }
        if let Some(first) = lease.search.first() {
            opts.insert(DhcpOption::DomainName(first.clone()));
            let names: Vec<Name> = lease
                .search
                .iter()
                .filter_map(|s| Name::from_str(s).ok())
                .collect();
            opts.insert(DhcpOption::DomainSearch(names));
        }
        if !lease.hostname.is_empty() {
            opts.insert(DhcpOption::Hostname(lease.hostname.clone()));
        }
        if let Some(mtu) = lease.mtu {
            opts.insert(DhcpOption::InterfaceMtu(mtu));
        }
    }
    // RFC 2131 4.1: a relay gets it on the server port; a configured client unicast;
    // everyone else (the guest has no address yet) by broadcast on the guest's bridge.
    let to = if !request.giaddr().is_unspecified() {
        SocketAddrV4::new(request.giaddr(), SERVER_PORT)
    } else if !request.ciaddr().is_unspecified() && kind != MessageType::Nak {
        SocketAddrV4::new(request.ciaddr(), CLIENT_PORT)
    } else {
        SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT)
    };
    Some((reply, to))
}

/// Answers the guest on `socket` (bound to port 67 on the guest's bridge, broadcast
/// allowed) until the task is dropped. A malformed packet is logged and skipped.
pub async fn serve(socket: UdpSocket, lease: Lease, reply_port: Option<u16>) {
    let mut buf = vec![0u8; 1500];
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(received) => received,
            Err(e) => {
                tracing::warn!("DHCP for {}: receive failed: {e}", lease.hostname);
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
        };
        let request = match Message::decode(&mut Decoder::new(&buf[..n])) {
            Ok(request) => request,
            Err(e) => {
                tracing::debug!("DHCP for {}: from {from}: not DHCP: {e}", lease.hostname);
                continue;
            }
        };
        let Some((reply, to)) = answer(&request, &lease) else {
            continue;
        };
        let mut bytes = Vec::new();
        if let Err(e) = reply.encode(&mut Encoder::new(&mut bytes)) {
            tracing::warn!("DHCP for {}: cannot encode a reply: {e}", lease.hostname);
            continue;
        }
        let to = SocketAddr::V4(SocketAddrV4::new(*to.ip(), reply_port.unwrap_or(to.port())));
        if let Err(e) = socket.send_to(&bytes, to).await {
            tracing::warn!("DHCP for {}: reply to {to} failed: {e}", lease.hostname);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x02, 0, 0, 0xaa, 0xbb, 0xcc];

    fn lease() -> Lease {
        Lease {
            mac: MAC,
            address: Ipv4Addr::new(10, 0, 2, 2),
            prefix_len: 24,
            gateway: Ipv4Addr::new(10, 0, 2, 1),
            dns_servers: vec![Ipv4Addr::new(10, 96, 0, 10)],
            search: vec![
                "default.svc.cluster.local".into(),
                "svc.cluster.local".into(),
                "cluster.local".into(),
            ],
            hostname: "vm1".into(),
            mtu: Some(1450),
        }
    }

    fn request(kind: MessageType, mac: [u8; 6], requested: Option<Ipv4Addr>) -> Message {
        let zero = Ipv4Addr::UNSPECIFIED;
        let mut m = Message::new_with_id(7, zero, zero, zero, zero, &mac);
        m.opts_mut().insert(DhcpOption::MessageType(kind));
        if let Some(ip) = requested {
            m.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
        }
        m
    }

    fn kind(m: &Message) -> MessageType {
        m.opts().msg_type().unwrap()
    }

    #[test]
    fn the_guest_is_offered_and_given_kubevirts_masquerade_address() {
        let (offer, to) = answer(&request(MessageType::Discover, MAC, None), &lease()).unwrap();
        assert_eq!(kind(&offer), MessageType::Offer);
        assert_eq!(offer.xid(), 7);
        assert_eq!(offer.yiaddr(), Ipv4Addr::new(10, 0, 2, 2));
        assert_eq!(to, SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT));
        let opts = offer.opts();
        assert_eq!(
            opts.get(OptionCode::SubnetMask),
            Some(&DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)))
        );
        assert_eq!(
            opts.get(OptionCode::Router),
            Some(&DhcpOption::Router(vec![Ipv4Addr::new(10, 0, 2, 1)]))
        );
        assert_eq!(
            opts.get(OptionCode::Hostname),
            Some(&DhcpOption::Hostname("vm1".into()))
        );
        assert_eq!(
            opts.get(OptionCode::AddressLeaseTime),
            Some(&DhcpOption::AddressLeaseTime(u32::MAX))
        );
        let Some(DhcpOption::DomainSearch(names)) = opts.get(OptionCode::DomainSearch) else {
            panic!("no search domains");
        };
        assert_eq!(names.len(), 3);
        let requested = Some(Ipv4Addr::new(10, 0, 2, 2));
        let (ack, _) = answer(&request(MessageType::Request, MAC, requested), &lease()).unwrap();
        assert_eq!(kind(&ack), MessageType::Ack);
        assert_eq!(ack.yiaddr(), Ipv4Addr::new(10, 0, 2, 2));
    }

    #[test]
    fn other_clients_and_other_addresses_get_no_lease() {
        let stranger = [0x02, 0, 0, 0, 0, 1];
        assert!(answer(&request(MessageType::Discover, stranger, None), &lease()).is_none());
        let wrong = Some(Ipv4Addr::new(10, 0, 2, 9));
        let (nak, _) = answer(&request(MessageType::Request, MAC, wrong), &lease()).unwrap();
        assert_eq!(kind(&nak), MessageType::Nak);
        assert_eq!(nak.yiaddr(), Ipv4Addr::UNSPECIFIED);
        assert!(answer(&request(MessageType::Release, MAC, None), &lease()).is_none());
    }

    #[test]
    fn a_hardware_address_longer_than_its_field_is_dropped_not_a_panic() {
        let mut bytes = Vec::new();
        request(MessageType::Discover, MAC, None)
            .encode(&mut Encoder::new(&mut bytes))
            .unwrap();
        bytes[2] = 200; // hlen
        let hostile = Message::decode(&mut Decoder::new(&bytes)).unwrap();
        assert!(answer(&hostile, &lease()).is_none());
    }

    #[test]
    fn macs_parse_as_kubevirt_writes_them() {
        assert_eq!(parse_mac("02:00:00:aa:bb:cc"), Some(MAC));
        assert_eq!(parse_mac("02:00:00:aa:bb"), None);
        assert_eq!(parse_mac("02:00:00:aa:bb:cc:dd"), None);
        assert_eq!(parse_mac("zz:00:00:aa:bb:cc"), None);
    }

    #[tokio::test]
    async fn the_server_answers_over_udp() {
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let server_addr = server.local_addr().unwrap();
        let client_port = client.local_addr().unwrap().port();
        // The reply goes to the broadcast address in a Pod; here to loopback.
        let mut lease = lease();
        lease.gateway = Ipv4Addr::LOCALHOST;
        let serving = tokio::spawn(async move {
            let socket = server;
            socket.set_broadcast(true).unwrap();
            serve(socket, lease, Some(client_port)).await
        });
        // A configured client (ciaddr) is answered by unicast: loopback here.
        let loopback = Message::new_with_id(
            9,
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            &MAC,
        );
        let mut inform = loopback;
        inform
            .opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Inform));
        let mut bytes = Vec::new();
        inform.encode(&mut Encoder::new(&mut bytes)).unwrap();
        client.send_to(b"not dhcp", server_addr).await.unwrap();
        client.send_to(&bytes, server_addr).await.unwrap();
        let mut buf = vec![0u8; 1500];
        let (n, _) = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            client.recv_from(&mut buf),
        )
        .await
        .expect("an answer")
        .unwrap();
        let reply = Message::decode(&mut Decoder::new(&buf[..n])).unwrap();
        assert_eq!(kind(&reply), MessageType::Ack);
        assert_eq!(reply.xid(), 9);
        assert_eq!(
            reply.opts().get(OptionCode::Hostname),
            Some(&DhcpOption::Hostname("vm1".into()))
        );
        serving.abort();
    }
}
