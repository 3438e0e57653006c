/* What the topology file reader (xml.c) and writer (xml_write.c) share. */
#ifndef COMM_TOPO_XML_INTERNAL_H_
#define COMM_TOPO_XML_INTERNAL_H_

#include <stdio.h>

#define XML_MAX_DEPTH 32 /* element nesting the reader accepts; the writer refuses deeper trees */

/* Attribute values of <pci kind> (commTopoPciKind) and <nic link> (commTopoNicLink), in enum order. */
extern const char* const commTopoPciKindNames[3];
extern const char* const commTopoNicLinkNames[3];

/* An attribute value with the five predefined entities and character references for control characters. */
void commXmlPutEscaped(FILE* f, const char* s);

#endif
