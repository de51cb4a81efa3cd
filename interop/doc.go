// Package interop holds redrive's interoperability tests: requests produced
// by kcat, by Python's confluent-kafka (librdkafka) and by Apache Kafka's
// Java client are handled by a running processor, and the results and dead
// letters are read back by kcat and by Python, headers and bytes checked.
// The clients' sources are in clients/; README.md maps redrive's headers to
// Spring Kafka's and Kafka Connect's.
//
// The package has no code of its own; everything is in its tests.
package interop
